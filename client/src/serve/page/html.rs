//! The page's HTML: escaping, the CLI's `Fields` as tables, and the document around a body.
//!
//! Every cell that holds a field carries `data-field="<name>"`, and every row or block that is
//! one record carries `data-record="<kind>" data-key="<key>"`: the browser test (and any
//! scraper) reads the page by them, not by its layout. A shortened key keeps its full value in
//! `data-value` and `title`.

use serde_json::Value;
use solana_pubkey::Pubkey;

use super::human;
use crate::output::Fields;

/// `s` as HTML text, safe in element content and in a double- or single-quoted attribute.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The value of field `name` of a record.
pub fn get<'a>(fields: &'a Fields, name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// Field `name` of a record as plain text (a string bare, anything else as JSON; `""` when
/// absent).
pub fn get_text(fields: &Fields, name: &str) -> String {
    match get(fields, name) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// A value as HTML: text escaped, null as a dash, a list of plain values comma-separated, a
/// nested record as a definition list.
pub fn value(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "–".into(),
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            items.iter().map(value).collect::<Vec<_>>().join(", ")
        }
        Value::Array(items) => items
            .iter()
            .map(|i| format!("<div class=\"item\">{}</div>", value(i)))
            .collect(),
        Value::Object(map) => {
            let rows: String = map
                .iter()
                .map(|(k, v)| format!("<dt>{}</dt><dd>{}</dd>", esc(k), value(v)))
                .collect();
            format!("<dl>{rows}</dl>")
        }
        other => esc(&other.to_string()),
    }
}

/// A table cell of field `name` at cluster time `now`: a public key other than the row's own
/// shortened to its ends, a value with a unit in its words (`human::shown`), each whole in
/// `title` and `data-value`; any other value whole.
fn cell(name: &str, v: &Value, now: i64) -> String {
    let raw = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Value::String(s) = v {
        if s.len() >= 32 && s.parse::<Pubkey>().is_ok() {
            let short = format!("{}…{}", &s[..4], &s[s.len() - 4..]);
            return format!(
                "<td data-field=\"{n}\" data-value=\"{v}\" title=\"{v}\"><code>{short}</code></td>",
                n = esc(name),
                v = esc(s),
            );
        }
    }
    match human::shown(name, v, now) {
        Some(text) => format!(
            "<td data-field=\"{n}\" data-value=\"{r}\" title=\"{r}\">{t}</td>",
            n = esc(name),
            r = esc(&raw),
            t = esc(&text),
        ),
        None => format!("<td data-field=\"{}\">{}</td>", esc(name), value(v)),
    }
}

/// One record as a two-column table (label | value, `cell`'s at cluster time `now`), only the
/// fields `only` names when given, in their order.
pub fn fields_table(fields: &Fields, only: Option<&[&str]>, now: i64) -> String {
    let shown: Vec<(&str, &Value)> = match only {
        Some(names) => names
            .iter()
            .filter_map(|n| get(fields, n).map(|v| (*n, v)))
            .collect(),
        None => fields.iter().map(|(k, v)| (*k, v)).collect(),
    };
    let rows: String = shown
        .iter()
        .map(|(k, v)| {
            format!(
                "<tr><th scope=\"row\">{}</th>{}</tr>",
                esc(&human::label(k)),
                cell(k, v, now)
            )
        })
        .collect();
    format!("<table class=\"record\"><tbody>{rows}</tbody></table>")
}

/// What a row of a list adds after its fields (its forms), as HTML.
pub type RowActions<'a> = &'a dyn Fn(&Fields) -> String;

/// How a list's rows are told apart and linked, and what each row adds after its fields.
pub struct ListOf<'a> {
    /// The kind of each row's record (`data-record`).
    pub kind: &'a str,
    /// The field that is each row's key (`data-key`), shown whole.
    pub key: &'a str,
    /// Where a row's key links to, if anywhere.
    pub link: Option<&'a dyn Fn(&str) -> String>,
    /// A last cell for each row (its actions), with this column header; `None`: no such cell.
    pub actions: Option<(&'a str, RowActions<'a>)>,
}

/// Records with the same fields as a table: one column per name of `columns`, under its label,
/// each cell `cell`'s at cluster time `now`.
pub fn list_table(of: &ListOf, columns: &[&str], rows: &[Fields], now: i64) -> String {
    if rows.is_empty() {
        return format!(
            "<p class=\"empty\" data-list=\"{}\">(none)</p>",
            esc(of.kind)
        );
    }
    let mut head: String = columns
        .iter()
        .map(|c| format!("<th scope=\"col\">{}</th>", esc(&human::label(c))))
        .collect();
    if let Some((title, _)) = of.actions {
        head.push_str(&format!("<th scope=\"col\">{}</th>", esc(title)));
    }
    let body: String = rows
        .iter()
        .map(|row| {
            let key = get_text(row, of.key);
            let mut cells = String::new();
            for &c in columns {
                let v = get(row, c).cloned().unwrap_or(Value::Null);
                if c != of.key {
                    cells.push_str(&cell(c, &v, now));
                    continue;
                }
                let text = format!("<code>{}</code>", esc(&key));
                let shown = match of.link {
                    Some(link) => format!("<a href=\"{}\">{text}</a>", esc(&link(&key))),
                    None => text,
                };
                cells.push_str(&format!("<td data-field=\"{}\">{shown}</td>", esc(c)));
            }
            if let Some((_, actions)) = of.actions {
                cells.push_str(&format!("<td class=\"actions\">{}</td>", actions(row)));
            }
            format!(
                "<tr data-record=\"{}\" data-key=\"{}\">{cells}</tr>",
                esc(of.kind),
                esc(&key)
            )
        })
        .collect();
    format!(
        "<div class=\"scroll\"><table class=\"list\" data-list=\"{}\"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>",
        esc(of.kind)
    )
}

/// A complete HTML document: `title`, the page's style, `body`, and the wallet script told the
/// Wallet Standard chain (`solana:localnet`, …) in its `data-chain`; `now` is the cluster time
/// every number of the body was read at.
pub fn document(title: &str, wallet_chain: &str, now: i64, body: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="/icon.svg">
<title>{title}</title>
<style>{STYLE}</style>
</head>
<body>
<header>
<h1><a href="/">GPU market</a></h1>
<div id="wallet"><select id="wallets" aria-label="Wallet" disabled><option value="">no wallet found</option></select>
<button id="connect" type="button" disabled>Connect wallet</button> <span id="account"></span></div>
</header>
<noscript><p class="note">Everything below is readable as it is; the forms need JavaScript and a
wallet that speaks the Wallet Standard (Phantom, Solflare, Backpack, …).</p></noscript>
<p id="status" role="status" aria-live="polite"></p>
<main id="data" data-cluster-time="{now}">
{body}
</main>
<script src="/wallet.js" data-chain="{chain}"></script>
</body>
</html>
"#,
        title = esc(title),
        chain = esc(wallet_chain),
    )
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1240px;padding:0 16px 32px;color:#1d2433;background:#fbfbfd}
header{display:flex;justify-content:space-between;align-items:center;gap:16px;border-bottom:1px solid #d8dce6;padding:8px 0}
h1{font-size:20px;margin:0}h1 a{color:inherit;text-decoration:none}
h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #e3e6ee;padding-bottom:4px}
h3{font-size:15px;margin:12px 0 6px}
code{font:12px ui-monospace,monospace}
table{border-collapse:collapse;margin:4px 0}
th,td{padding:3px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #eceef3}
table.list th{background:#f0f2f7;font-weight:600;white-space:nowrap}
table.record th{font-weight:500;color:#5a6478}
dl{margin:0;display:grid;grid-template-columns:auto auto;gap:0 8px}dt{color:#5a6478}dd{margin:0}
.scroll{overflow-x:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
.machines{grid-template-columns:repeat(auto-fill,minmax(600px,1fr))}
table.list td{white-space:nowrap}
table.list td[data-field=answer]{white-space:normal;min-width:28em;max-width:48em}
div.terminal{width:60em;max-width:100%;height:384px;overflow:hidden;background:#000;padding:4px;border-radius:4px;resize:both}
pre.logs{max-height:24em;max-width:60em;overflow:auto;background:#14161c;color:#e6e8ee;padding:6px 8px;border-radius:4px;white-space:pre-wrap}
.card{background:#fff;border:1px solid #e3e6ee;border-radius:6px;padding:8px 12px}
form.action{display:flex;flex-wrap:wrap;gap:6px 10px;align-items:end;margin:4px 0}
form.action label{display:flex;flex-direction:column;font-size:12px;color:#5a6478}
form.action input{font:13px ui-monospace,monospace;padding:3px 5px;min-width:7em}
form.wide label{flex:1 1 220px}
form.action label.env{flex:1 1 100%}
form.action textarea{font:13px ui-monospace,monospace;padding:3px 5px}
button{font:inherit;padding:4px 12px;border-radius:4px;border:1px solid #3f6fd8;background:#3f6fd8;color:#fff;cursor:pointer}
button:disabled{background:#c4cad6;border-color:#c4cad6;cursor:default}
details summary{cursor:pointer;color:#3f6fd8}
#status{min-height:1.4em;margin:8px 0;word-break:break-all}
#status[data-state=error]{color:#b3261e}#status[data-state=done],#status[data-state=sent]{color:#1b7f4b}
.note{color:#5a6478}.empty{color:#5a6478}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:3px;vertical-align:middle;margin-right:4px}
svg.plot{background:#fff;border:1px solid #e3e6ee;border-radius:6px;max-width:100%;height:auto}
svg.plot text{font:11px system-ui,sans-serif;fill:#5a6478}
";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_and_attributes_are_escaped() {
        assert_eq!(
            esc(r#"<img src=x onerror="a('b')">&"#),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;"
        );
        let fields: Fields = vec![("image", json!("<script>alert(1)</script>"))];
        let html = fields_table(&fields, None, 0);
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        let doc = document("a</title><b>", "solana:\"x", 7, "");
        assert!(
            doc.contains("<title>a&lt;/title&gt;&lt;b&gt;</title>"),
            "{doc}"
        );
        assert!(doc.contains("data-chain=\"solana:&quot;x\""), "{doc}");
    }

    #[test]
    fn a_list_keys_each_row_and_shortens_the_other_keys() {
        let key = Pubkey::new_unique().to_string();
        let client = Pubkey::new_unique().to_string();
        let rows: Vec<Fields> = vec![vec![
            ("bid", json!(key)),
            ("client", json!(client)),
            ("gpus", json!(2)),
        ]];
        let link = |k: &str| format!("/bid/{k}");
        let of = ListOf {
            kind: "bid",
            key: "bid",
            link: Some(&link),
            actions: None,
        };
        let html = list_table(&of, &["bid", "client", "gpus"], &rows, 0);
        assert!(html.contains(&format!("data-record=\"bid\" data-key=\"{key}\"")));
        assert!(html.contains(&format!("<a href=\"/bid/{key}\"><code>{key}</code></a>")));
        assert!(html.contains(&format!("data-value=\"{client}\"")));
        assert!(html.contains("<td data-field=\"gpus\">2</td>"));
    }
}
