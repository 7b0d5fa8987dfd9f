//! Page HTML → markdown for `extract` (the model call on it is the agent's job).

use serde::Serialize;

/// Characters of markdown handed to the model per `extract` call (browser-use's chunk size).
pub const CHUNK_CHARS: usize = 100_000;

/// The markdown of a page and how it was cut.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PageMarkdown {
    /// The chunk starting at `start_from_char`.
    pub content: String,
    /// browser-use's `<content_stats>` figures.
    pub stats: ContentStats,
}

/// Sizes reported to the extraction model.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ContentStats {
    pub original_html_chars: usize,
    pub total_markdown_chars: usize,
    pub start_from_char: usize,
    pub chunk_chars: usize,
    /// Where the next chunk starts, when the page continues.
    pub next_start_char: Option<usize>,
}

/// Converts cleaned page HTML (scripts, styles and, unless wanted, links and images already
/// removed by the page-side script) to markdown and cuts the chunk at `start_from_char`
/// (counted in characters; a chunk ends at a line break when one is near the limit).
pub fn html_to_markdown(html: &str, start_from_char: usize) -> Result<PageMarkdown, String> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "canvas", "iframe", "head",
        ])
        .build();
    let markdown = converter
        .convert(html)
        .map_err(|e| format!("markdown conversion failed: {e}"))?;
    let markdown = collapse_blank_lines(&markdown);
    let total = markdown.chars().count();
    if start_from_char > 0 && start_from_char >= total {
        return Err(format!(
            "start_from_char ({start_from_char}) is beyond the page content ({total} characters)"
        ));
    }
    let chunk: String = markdown
        .chars()
        .skip(start_from_char)
        .take(CHUNK_CHARS)
        .collect();
    let mut chunk_chars = chunk.chars().count();
    let mut content = chunk;
    let mut next = None;
    if start_from_char + chunk_chars < total {
        // Prefer to end on a line break in the last 5 % of the chunk.
        if let Some(cut) = content.rfind('\n') {
            let cut_chars = content[..cut].chars().count();
            if cut_chars > CHUNK_CHARS * 95 / 100 {
                content.truncate(cut);
                chunk_chars = cut_chars;
            }
        }
        next = Some(start_from_char + chunk_chars);
    }
    Ok(PageMarkdown {
        content,
        stats: ContentStats {
            original_html_chars: html.chars().count(),
            total_markdown_chars: total,
            start_from_char,
            chunk_chars,
            next_start_char: next,
        },
    })
}

fn collapse_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_and_chunks() {
        let md = html_to_markdown(
            "<h1>Title</h1><p>Hello <b>world</b></p><script>x()</script>",
            0,
        )
        .expect("md");
        assert!(md.content.contains("# Title"), "{}", md.content);
        assert!(md.content.contains("**world**"), "{}", md.content);
        assert!(!md.content.contains("x()"));
        assert_eq!(md.stats.next_start_char, None);
        let big = format!("<p>{}</p>", "a".repeat(CHUNK_CHARS + 10));
        let md = html_to_markdown(&big, 0).expect("md");
        assert_eq!(md.stats.next_start_char, Some(CHUNK_CHARS));
        let rest = html_to_markdown(&big, CHUNK_CHARS).expect("md");
        assert_eq!(rest.content.chars().count(), 10);
        assert!(html_to_markdown("<p>a</p>", 50).is_err());
    }
}
