//! The tools. Each is thin: it says what to instrument through `dbt_core::tool` and what to
//! write at the end.
pub mod cachegrind;
pub mod callgrind;
pub mod none;

use crate::cli::ToolName;

/// Whether `name` is an option of some tool (checked against the chosen tool later).
pub fn is_tool_option(name: &str) -> bool {
    cachegrind::OPTION_NAMES.contains(&name) || callgrind::accepts(name)
}

/// Whether the tool accepts the option `name`.
pub fn tool_accepts(tool: ToolName, name: &str) -> bool {
    match tool {
        ToolName::Cachegrind => cachegrind::OPTION_NAMES.contains(&name),
        ToolName::Callgrind => callgrind::accepts(name),
        ToolName::None => false,
    }
}
