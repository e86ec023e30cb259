/* rgrind's stand-in for Valgrind's vgpreload_core-amd64-linux.so.
 *
 * Valgrind LD_PRELOADs that object into every program it runs, so ld.so maps and relocates one
 * more object and searches it in every symbol lookup; that work is part of every count Valgrind
 * reports. rgrind preloads this object (with --guest-env=valgrind) to make ld.so do the same
 * work: the same two defined symbols (their names decide the GNU-hash bloom filter, hence the
 * lookup cost), the same weak references to resolve, the same INITFIRST/INTERPOSE flags and
 * start files. Nothing in rgrind calls these functions.
 */
extern void __libc_freeres(void) __attribute__((weak));
extern void _ZN9__gnu_cxx9__freeresEv(void) __attribute__((weak));

void _vgnU_freeres(unsigned int to_run);
void _vgnU_freeres(unsigned int to_run)
{
   if ((to_run & 1) != 0 && __libc_freeres != 0)
      __libc_freeres();
   if ((to_run & 2) != 0 && _ZN9__gnu_cxx9__freeresEv != 0)
      _ZN9__gnu_cxx9__freeresEv();
   __builtin_trap();
}

void *_vgnU_ifunc_wrapper(void);
void *_vgnU_ifunc_wrapper(void)
{
   return 0;
}
