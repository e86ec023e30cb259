//! The tools. Each is thin: it says what to instrument through `dbt_core::tool` and what to
//! write at the end.
pub mod none;
