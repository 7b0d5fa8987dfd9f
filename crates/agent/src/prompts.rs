//! The agent's prompts, kept as text files under `prompts/` (written for browserd).

use crate::config::{TaskConfig, VisionMode};

const SYSTEM: &str = include_str!("prompts/system.md");
const SYSTEM_FLASH: &str = include_str!("prompts/system_flash.md");
const OUTPUT_FULL: &str = include_str!("prompts/output_full.md");
const OUTPUT_NO_THINKING: &str = include_str!("prompts/output_no_thinking.md");
const VISION: &str = include_str!("prompts/vision.md");
/// System prompt of the history compaction call (`{max_chars}` filled in).
pub const COMPACTION: &str = include_str!("prompts/compaction.md");
/// System prompt of the `extract` model call.
pub const EXTRACT: &str = include_str!("prompts/extract.md");

/// The system prompt for a task: flash or full (with or without `thinking`), the vision
/// paragraph when screenshots may be sent, `{max_actions}` filled in, then the override/extension.
pub fn system_prompt(config: &TaskConfig) -> String {
    if let Some(text) = &config.override_system_message {
        return text.clone();
    }
    let vision = if config.use_vision == VisionMode::Never {
        String::new()
    } else {
        VISION.to_owned()
    };
    let mut prompt = if config.flash_mode {
        SYSTEM_FLASH.to_owned()
    } else {
        let format = if config.use_thinking {
            OUTPUT_FULL
        } else {
            OUTPUT_NO_THINKING
        };
        SYSTEM.replace("{output_format}", format.trim_end())
    };
    prompt = prompt
        .replace("{vision_section}", &vision)
        .replace("{max_actions}", &config.max_actions_per_step.to_string());
    if let Some(extra) = &config.extend_system_message {
        prompt.push('\n');
        prompt.push_str(extra);
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_differ_and_placeholders_are_filled() {
        let mut c = TaskConfig::new("t");
        let full = system_prompt(&c);
        assert!(full.contains("\"thinking\""));
        assert!(full.contains("up to 5 actions"));
        assert!(full.contains("screenshot of the current viewport"));
        assert!(!full.contains('{') || !full.contains("{max_actions}"));
        assert!(!full.contains("{vision_section}") && !full.contains("{output_format}"));
        c.use_thinking = false;
        assert!(!system_prompt(&c).contains("\"thinking\""));
        c.use_vision = VisionMode::Never;
        assert!(!system_prompt(&c).contains("screenshot of the current viewport"));
        c.flash_mode = true;
        c.max_actions_per_step = 3;
        let flash = system_prompt(&c);
        assert!(flash.len() < full.len() / 2);
        assert!(flash.contains("Up to 3 actions") && !flash.contains("next_goal"));
        c.extend_system_message = Some("EXTRA RULE".into());
        assert!(system_prompt(&c).ends_with("EXTRA RULE"));
    }
}
