//! Symbolised costs and Valgrind-format profile files (filled in by the dumper work).
