//! Guest loading (filled in by the loader work).
