//! Text tables as the CLI and the agent print them: left-aligned columns, two spaces apart, a
//! header row first.

/// `rows` under `header`, each line ending in a newline, trailing spaces trimmed.
pub fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align_under_their_header() {
        let text = super::columns(
            &["gpu", "outcome"],
            &[
                vec!["0".into(), "ok".into()],
                vec!["12".into(), "FAILED".into()],
            ],
        );
        assert_eq!(text, "gpu  outcome\n0    ok\n12   FAILED\n");
    }
}
