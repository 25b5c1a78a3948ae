//! GPU classes by the model names their market gives them (`market name-class`): how the CLI
//! reads a class its user names, and how it writes one.

use anyhow::{bail, Result};
use gpu_market::state::{Market, CLASS_NAME_LEN, GPU_CLASSES};
use serde_json::{json, Value};

use crate::parse;

/// The class `text` names in market `m`: its number, or its name whatever its case.
pub(crate) fn parse(m: &Market, text: &str) -> Result<u8> {
    if let Ok(class) = text.parse::<u8>() {
        if class as usize >= GPU_CLASSES {
            bail!("GPU class {class} is not one of the market's classes 0..{GPU_CLASSES}");
        }
        return Ok(class);
    }
    if let Some((class, _)) = named(m)
        .into_iter()
        .find(|(_, name)| name.eq_ignore_ascii_case(text))
    {
        return Ok(class);
    }
    let names: Vec<String> = named(m)
        .into_iter()
        .map(|(class, name)| format!("{name} ({class})"))
        .collect();
    match names.is_empty() {
        true => bail!("the market names no GPU class, so {text:?} is none: give a class number 0..{GPU_CLASSES}"),
        false => bail!("the market names no GPU class {text:?}: its classes are {}", names.join(", ")),
    }
}

/// The name `text` as the program takes it (zero-padded), checked as the program checks it.
pub(crate) fn name(text: &str) -> Result<[u8; CLASS_NAME_LEN]> {
    let name = parse::padded::<CLASS_NAME_LEN>(text, "GPU class name")?;
    if !gpu_market::state::class_name_valid(&name) {
        bail!("a GPU class name is 1 to {CLASS_NAME_LEN} printable ASCII characters, spaces inside only: not {text:?}");
    }
    Ok(name)
}

/// The market's named classes, by number.
pub(crate) fn named(m: &Market) -> Vec<(u8, String)> {
    m.class_names
        .iter()
        .enumerate()
        .filter(|(_, n)| n[0] != 0)
        .map(|(class, n)| (class as u8, parse::unpadded(n)))
        .collect()
}

/// How a class is written for people: its name, else its number.
pub(crate) fn label(m: &Market, class: u8) -> String {
    match m.class_names.get(class as usize).filter(|n| n[0] != 0) {
        Some(n) => parse::unpadded(n),
        None => format!("class {class}"),
    }
}

/// The named classes as `market show` prints them.
pub(crate) fn value(m: &Market) -> Value {
    Value::from(
        named(m)
            .into_iter()
            .map(|(class, name)| json!({"class": class, "name": name}))
            .collect::<Vec<_>>(),
    )
}

/// The classes that exist in market `m`: those it names and those its machines' GPUs are of
/// (`declared`); every class of a market that has neither yet.
pub(crate) fn in_use(m: &Market, declared: impl IntoIterator<Item = u8>) -> Vec<u8> {
    let mut classes: Vec<u8> = named(m).into_iter().map(|(c, _)| c).collect();
    classes.extend(declared);
    classes.sort_unstable();
    classes.dedup();
    if classes.is_empty() {
        classes = (0..GPU_CLASSES as u8).collect();
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_market::state::MarketParams;

    fn market(names: &[(u8, &str)]) -> Market {
        let mut m = Market::opening(MarketParams::recommended(60, 250, 86_400));
        for (class, n) in names {
            m.name_gpu_class(*class, name(n).unwrap()).unwrap();
        }
        m
    }

    #[test]
    fn a_class_is_read_by_number_or_by_name_in_any_case_and_written_by_name() {
        let m = market(&[(0, "H100"), (3, "RTX 4090")]);
        assert_eq!(parse(&m, "h100").unwrap(), 0);
        assert_eq!(parse(&m, "RTX 4090").unwrap(), 3);
        assert_eq!(parse(&m, "5").unwrap(), 5);
        let e = parse(&m, "A100").unwrap_err().to_string();
        assert!(e.contains("H100 (0), RTX 4090 (3)"), "{e}");
        assert!(parse(&m, "8").is_err());
        assert_eq!(label(&m, 3), "RTX 4090");
        assert_eq!(label(&m, 1), "class 1");
        assert_eq!(in_use(&m, [1, 0]), vec![0, 1, 3]);
        assert_eq!(in_use(&market(&[]), []).len(), GPU_CLASSES);
        assert!(name(" H100").is_err() && name("H100 SXM5 80GB HBM3").is_err());
    }
}
