/* System V shared memory: shmat, mremap of the segment, shmdt. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
int main(void) {
    int id = shmget(IPC_PRIVATE, 3 * 4096, IPC_CREAT | 0600);
    char *p = shmat(id, 0, 0);
    strcpy(p, "shared");
    char *q = mremap(p, 3 * 4096, 3 * 4096, 0);
    printf("mremap same=%d text=%s\n", q == p, q);
    shmdt(p);
    shmctl(id, IPC_RMID, 0);
    return 0;
}
