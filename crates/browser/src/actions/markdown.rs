//! Page HTML → markdown for `extract` (the model call on it is the agent's job).

use browserd_views::MarkdownChunk;

/// Converts cleaned page HTML (scripts, styles and, unless wanted, links and images already
/// removed by the page-side script) to markdown and cuts the chunk at `start_from_char`
/// ([`MarkdownChunk::cut`]).
pub fn html_to_markdown(html: &str, start_from_char: usize) -> Result<MarkdownChunk, String> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "canvas", "iframe", "head",
        ])
        .build();
    let markdown = converter
        .convert(html)
        .map_err(|e| format!("markdown conversion failed: {e}"))?;
    let markdown = collapse_blank_lines(&markdown);
    MarkdownChunk::cut(&markdown, start_from_char, html.chars().count())
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
        let big = format!("<p>{}</p>", "a".repeat(MarkdownChunk::MAX_CHARS + 10));
        let md = html_to_markdown(&big, 0).expect("md");
        assert_eq!(md.stats.next_start_char, Some(MarkdownChunk::MAX_CHARS));
        let rest = html_to_markdown(&big, MarkdownChunk::MAX_CHARS).expect("md");
        assert_eq!(rest.content.chars().count(), 10);
        assert!(html_to_markdown("<p>a</p>", 50).is_err());
    }
}
