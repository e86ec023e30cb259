//! Cache and branch-predictor models (filled in by the cachesim work).
