//! Key names → CDP `Input.dispatchKeyEvent` parameters, with browser-use's aliases.

use serde_json::{Value, json};

/// One key press (modifiers held, then the key).
#[derive(Clone, Debug, PartialEq)]
pub struct KeyPress {
    /// Modifier keys held (`Control`, `Shift`, `Alt`, `Meta`).
    pub modifiers: Vec<&'static str>,
    /// The key (`Enter`, `a`, `ArrowDown`, …).
    pub key: String,
}

fn alias(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let mapped = match lower.as_str() {
        "ctrl" | "control" => "Control",
        "cmd" | "command" | "meta" | "super" | "win" | "windows" => "Meta",
        "alt" | "option" | "opt" => "Alt",
        "shift" => "Shift",
        "esc" | "escape" => "Escape",
        "enter" | "return" => "Enter",
        "tab" => "Tab",
        "space" | "spacebar" => " ",
        "backspace" | "back" => "Backspace",
        "del" | "delete" => "Delete",
        "up" | "arrowup" => "ArrowUp",
        "down" | "arrowdown" => "ArrowDown",
        "left" | "arrowleft" => "ArrowLeft",
        "right" | "arrowright" => "ArrowRight",
        "pageup" | "pgup" => "PageUp",
        "pagedown" | "pgdn" | "pgdown" => "PageDown",
        "home" => "Home",
        "end" => "End",
        "insert" | "ins" => "Insert",
        _ => {
            if let Some(n) = lower.strip_prefix('f').and_then(|n| n.parse::<u8>().ok())
                && (1..=12).contains(&n)
            {
                return format!("F{n}");
            }
            return name.to_owned();
        }
    };
    mapped.to_owned()
}

fn modifier(name: &str) -> Option<&'static str> {
    match name {
        "Control" => Some("Control"),
        "Meta" => Some("Meta"),
        "Alt" => Some("Alt"),
        "Shift" => Some("Shift"),
        _ => None,
    }
}

/// Parses browser-use's `keys` string: `Enter`, `Control+a`, `ctrl+shift+t`, or several
/// presses separated by spaces (`Tab Tab Enter`). Anything that is not a known key name is
/// typed as text, character by character.
pub fn parse_keys(keys: &str) -> Vec<KeyPress> {
    let mut out = Vec::new();
    let trimmed = keys.trim();
    if trimmed.is_empty() {
        return out;
    }
    let is_known = |s: &str| {
        let a = alias(s);
        a.chars().count() == 1 || definition(&a).is_some()
    };
    let words: Vec<&str> = trimmed.split_whitespace().collect();
    let all_keys = words
        .iter()
        .all(|w| w.split('+').filter(|p| !p.is_empty()).all(is_known) && !w.is_empty());
    if !all_keys {
        for ch in keys.chars() {
            out.push(KeyPress {
                modifiers: vec![],
                key: if ch == '\n' {
                    "Enter".into()
                } else {
                    ch.to_string()
                },
            });
        }
        return out;
    }
    for word in words {
        let parts: Vec<String> = if word == "+" {
            vec!["+".into()]
        } else {
            word.split('+')
                .filter(|p| !p.is_empty())
                .map(alias)
                .collect()
        };
        let mut modifiers = Vec::new();
        let mut key = None;
        for (i, part) in parts.iter().enumerate() {
            match modifier(part) {
                Some(m) if i + 1 < parts.len() => modifiers.push(m),
                _ => key = Some(part.clone()),
            }
        }
        if let Some(key) = key {
            out.push(KeyPress { modifiers, key });
        }
    }
    out
}

/// (code, windowsVirtualKeyCode, text) of named keys.
fn definition(key: &str) -> Option<(&'static str, i64, Option<&'static str>)> {
    Some(match key {
        "Enter" => ("Enter", 13, Some("\r")),
        "Tab" => ("Tab", 9, None),
        "Escape" => ("Escape", 27, None),
        "Backspace" => ("Backspace", 8, None),
        "Delete" => ("Delete", 46, None),
        "ArrowUp" => ("ArrowUp", 38, None),
        "ArrowDown" => ("ArrowDown", 40, None),
        "ArrowLeft" => ("ArrowLeft", 37, None),
        "ArrowRight" => ("ArrowRight", 39, None),
        "Home" => ("Home", 36, None),
        "End" => ("End", 35, None),
        "PageUp" => ("PageUp", 33, None),
        "PageDown" => ("PageDown", 34, None),
        "Insert" => ("Insert", 45, None),
        "Control" => ("ControlLeft", 17, None),
        "Shift" => ("ShiftLeft", 16, None),
        "Alt" => ("AltLeft", 18, None),
        "Meta" => ("MetaLeft", 91, None),
        "F1" => ("F1", 112, None),
        "F2" => ("F2", 113, None),
        "F3" => ("F3", 114, None),
        "F4" => ("F4", 115, None),
        "F5" => ("F5", 116, None),
        "F6" => ("F6", 117, None),
        "F7" => ("F7", 118, None),
        "F8" => ("F8", 119, None),
        "F9" => ("F9", 120, None),
        "F10" => ("F10", 121, None),
        "F11" => ("F11", 122, None),
        "F12" => ("F12", 123, None),
        _ => return None,
    })
}

fn modifier_bit(m: &str) -> i64 {
    match m {
        "Alt" => 1,
        "Control" => 2,
        "Meta" => 4,
        "Shift" => 8,
        _ => 0,
    }
}

/// The `Input.dispatchKeyEvent` parameter objects (down…up) of one press.
pub(crate) fn key_events(press: &KeyPress) -> Vec<Value> {
    let mut events = Vec::new();
    let mut mask = 0;
    for m in &press.modifiers {
        let (code, vk, _) = definition(m).unwrap_or(("", 0, None));
        mask |= modifier_bit(m);
        events.push(json!({"type": "rawKeyDown", "key": m, "code": code, "windowsVirtualKeyCode": vk, "modifiers": mask}));
    }
    let (code, vk, text): (String, i64, Option<String>) = match definition(&press.key) {
        Some((code, vk, text)) => (code.to_owned(), vk, text.map(str::to_owned)),
        None => {
            let ch = press.key.chars().next().unwrap_or(' ');
            let (code, vk) = char_code(ch);
            (code, vk, Some(press.key.clone()))
        }
    };
    // With Control/Alt/Meta held the key is a shortcut, not text.
    let shortcut = press.modifiers.iter().any(|m| *m != "Shift");
    let mut down =
        json!({"key": press.key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": mask});
    match (&text, shortcut) {
        (Some(text), false) => {
            down["type"] = json!("keyDown");
            down["text"] = json!(text);
            down["unmodifiedText"] = json!(text);
        }
        _ => down["type"] = json!("rawKeyDown"),
    }
    if shortcut && press.key.chars().count() == 1 {
        // Editing shortcuts on Linux need the command spelled out for some keys.
        let command = match (
            press.key.to_ascii_lowercase().as_str(),
            press.modifiers.contains(&"Shift"),
        ) {
            ("a", false) => Some("selectAll"),
            ("c", false) => Some("copy"),
            ("x", false) => Some("cut"),
            ("v", false) => Some("paste"),
            ("z", false) => Some("undo"),
            ("z", true) | ("y", false) => Some("redo"),
            _ => None,
        };
        if let Some(command) = command {
            down["commands"] = json!([command]);
        }
    }
    events.push(down);
    events.push(json!({"type": "keyUp", "key": press.key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": mask}));
    for m in press.modifiers.iter().rev() {
        let (code, vk, _) = definition(m).unwrap_or(("", 0, None));
        mask &= !modifier_bit(m);
        events.push(json!({"type": "keyUp", "key": m, "code": code, "windowsVirtualKeyCode": vk, "modifiers": mask}));
    }
    events
}

fn char_code(ch: char) -> (String, i64) {
    if ch.is_ascii_alphabetic() {
        (
            format!("Key{}", ch.to_ascii_uppercase()),
            ch.to_ascii_uppercase() as i64,
        )
    } else if ch.is_ascii_digit() {
        (format!("Digit{ch}"), ch as i64)
    } else if ch == ' ' {
        ("Space".into(), 32)
    } else {
        (String::new(), 0)
    }
}

/// Events that type one character of text (`\n` presses Enter).
pub(crate) fn char_events(ch: char) -> Vec<Value> {
    let key = if ch == '\n' {
        "Enter".to_owned()
    } else {
        ch.to_string()
    };
    key_events(&KeyPress {
        modifiers: vec![],
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_combos_and_aliases() {
        assert_eq!(
            parse_keys("ctrl+a"),
            vec![KeyPress {
                modifiers: vec!["Control"],
                key: "a".into()
            }]
        );
        assert_eq!(parse_keys("Escape")[0].key, "Escape");
        assert_eq!(parse_keys("esc")[0].key, "Escape");
        assert_eq!(
            parse_keys("cmd+shift+T")[0].modifiers,
            vec!["Meta", "Shift"]
        );
        assert_eq!(parse_keys("Tab Tab Enter").len(), 3);
        let typed = parse_keys("hello world");
        assert_eq!(typed.len(), 11);
        let events = key_events(&parse_keys("Control+a")[0]);
        assert_eq!(events.len(), 4);
        assert_eq!(events[1]["commands"], json!(["selectAll"]));
        assert_eq!(events[1]["modifiers"], json!(2));
    }
}
