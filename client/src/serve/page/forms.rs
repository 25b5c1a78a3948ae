//! The page's action forms, made from the actions' own metadata (`Action::metadata`: title and
//! parameters), so that a form asks for exactly what its action reads: the bid form's fields are
//! the `bid` action's parameters, which are `bid place`'s flags.
//!
//! A form is plain HTML: `data-action` is its action's URL with the parameters the page already
//! knows (the bid of a row, the lease); an input for each other parameter. `wallet.js` posts it
//! for the connected wallet; without JavaScript its button stays disabled.

use serde_json::Value;

use super::html::esc;
use crate::serve::actions::{Action, ENV_HASH};

/// The form of `action` with the parameters `fixed` in its URL; `wide` lays its inputs out in a
/// grid (the bid form's many fields).
pub fn action_form(action: Action, fixed: &[(&str, &str)], wide: bool) -> String {
    let meta = action.metadata("");
    let link = &meta["links"]["actions"][0];
    let title = meta["title"].as_str().unwrap_or(action.name());
    let mut url = format!("/api/actions/{}", action.name());
    if !fixed.is_empty() {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fixed)
            .finish();
        url = format!("{url}?{query}");
    }
    let inputs: String = link["parameters"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|p| !fixed.iter().any(|(k, _)| p["name"] == *k))
        // The page computes the environment's hash itself, from the text below.
        .filter(|p| p["name"] != ENV_HASH)
        .map(input)
        .collect();
    // The bid's environment, sealed in the browser (`wallet.js` with `seal.js`).
    let env = match action {
        Action::Bid => "<label class=\"env\">Environment, KEY=VALUE lines (optional): sealed in this browser to the machines that may run the bid<textarea name=\"env\" rows=\"3\" autocomplete=\"off\" spellcheck=\"false\"></textarea></label>",
        _ => "",
    };
    format!(
        "<form class=\"action{wide}\" data-action=\"{url}\" title=\"{description}\">{inputs}{env}<button type=\"submit\" disabled>{title}</button></form>",
        wide = if wide { " wide" } else { "" },
        url = esc(&url),
        description = esc(meta["description"].as_str().unwrap_or_default()),
        title = esc(title),
    )
}

/// The forms of a waiting bid's row (`bid list`'s record): top up and cancel, folded.
pub fn bid_actions(row: &crate::output::Fields) -> String {
    let bid = super::html::get_text(row, "bid");
    format!(
        "<details><summary>act</summary>{}{}</details>",
        action_form(Action::TopUp, &[("bid", &bid)], false),
        action_form(Action::Cancel, &[("bid", &bid)], false),
    )
}

/// The forms that ask a lease's agent, with a request the wallet signs (`lease_api`), for where
/// to connect to the container's published ports, for its output as printed, for one of its
/// files or folders, and for a terminal.
pub fn lease_forms(lease: &str) -> String {
    format!(
        "<form class=\"action\" data-lease=\"{l}\" data-call=\"status\"><button type=\"submit\" disabled>Where to connect</button></form>\
         <form class=\"action\" data-lease=\"{l}\" data-call=\"logs\"><button type=\"submit\" disabled>Show its logs</button></form>\
         <form class=\"action\" data-lease=\"{l}\" data-call=\"file\"><label>A file or folder (a folder comes as .tar)<input name=\"path\" value=\"/workspace/\" autocomplete=\"off\"></label><button type=\"submit\" disabled>Download</button></form>\
         <form class=\"action\" data-lease=\"{l}\" data-call=\"terminal\"><button type=\"submit\" disabled>Open a terminal</button></form>",
        l = esc(lease),
    )
}

/// An input for one of an action's parameters (`{"name", "label", "required"}`).
fn input(p: &Value) -> String {
    let name = p["name"].as_str().unwrap_or_default();
    let label = p["label"].as_str().unwrap_or(name);
    let required = p["required"].as_bool().unwrap_or(false);
    format!(
        "<label>{label}{optional}<input name=\"{name}\"{required} autocomplete=\"off\"></label>",
        label = esc(label),
        optional = if required { "" } else { " (optional)" },
        name = esc(name),
        required = if required { " required" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_asks_for_the_parameters_its_url_does_not_fix() {
        let html = action_form(Action::TopUp, &[("bid", "B1d")], false);
        assert!(
            html.contains("data-action=\"/api/actions/top-up?bid=B1d\""),
            "{html}"
        );
        assert!(html.contains("<input name=\"amount\" required"), "{html}");
        assert!(!html.contains("name=\"bid\""), "{html}");
        let bid = action_form(Action::Bid, &[], true);
        for name in [
            "image",
            "image-digest",
            "gpus",
            "price",
            "duration",
            "class",
        ] {
            assert!(bid.contains(&format!("name=\"{name}\"")), "{name}: {bid}");
        }
        // The environment is a text the page seals, not its hash to type in.
        assert!(bid.contains("<textarea name=\"env\""), "{bid}");
        assert!(!bid.contains("name=\"env-hash\""), "{bid}");
        let withdraw = action_form(Action::Withdraw, &[], false);
        assert!(withdraw.contains("data-action=\"/api/actions/withdraw\""));
        assert!(!withdraw.contains("<input"));
    }
}
