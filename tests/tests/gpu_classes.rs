//! GPU classes by model name: the market's authority names each class once (`name_gpu_class`),
//! and a class keeps its name for the life of the market, so a bid for "H100" never comes to
//! mean another model. Who may name, which names are refused, and that a refusal changes
//! nothing. On the SBF build in LiteSVM.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::state::{Market, CLASS_NAME_LEN, GPU_CLASSES};
use gpu_market_sdk::instructions::NameGpuClass;
use gpu_market_tests::program_test::Failure;
use lease_fixture::*;
use solana_keypair::Keypair;

/// `name` zero-padded (longer names keep their first 16 bytes: the program then sees them).
fn name(text: &[u8]) -> [u8; CLASS_NAME_LEN] {
    let mut n = [0; CLASS_NAME_LEN];
    let len = text.len().min(CLASS_NAME_LEN);
    n[..len].copy_from_slice(&text[..len]);
    n
}

fn name_class(
    f: &mut Fixture,
    by: &Keypair,
    class: u8,
    n: [u8; CLASS_NAME_LEN],
) -> Result<(), Failure> {
    f.ctx
        .run(&NameGpuClass {
            authority: by,
            market: f.market,
            class,
            name: n,
        })
        .map(|_| ())
}

#[test]
fn the_authority_names_each_gpu_class_once_and_bad_or_taken_names_change_nothing() {
    let mut f = fixture();
    let authority = f.authority.insecure_clone();
    name_class(&mut f, &authority, 0, name(b"H100")).expect("name_gpu_class");
    name_class(&mut f, &authority, 1, name(b"RTX 4090")).expect("a space inside");
    name_class(&mut f, &authority, 7, name(b"A100 80GB SXM4")).expect("the last class");
    let named: Market = f.ctx.account(&f.market);
    assert_eq!(named.class_names[0], name(b"H100"));
    assert_eq!(named.class_names[1], name(b"RTX 4090"));
    assert_eq!(named.class_names[7], name(b"A100 80GB SXM4"));
    assert_eq!(named.class_names[2], [0; CLASS_NAME_LEN], "unnamed");

    let refused = |f: &mut Fixture, by: &Keypair, class: u8, n, error: MarketError| {
        let err = name_class(f, by, class, n).unwrap_err();
        assert_eq!(
            err.custom_code(),
            code(error),
            "{:?}",
            String::from_utf8_lossy(&n)
        );
        assert_eq!(
            f.ctx.account::<Market>(&f.market).data,
            named.data,
            "nothing changed"
        );
    };
    // Someone else.
    let stranger = f.ctx.wallet(1);
    refused(
        &mut f,
        &stranger,
        2,
        name(b"L40S"),
        MarketError::NotMarketAuthority,
    );
    // A class with a name keeps it.
    refused(
        &mut f,
        &authority,
        0,
        name(b"B200"),
        MarketError::GpuClassNamed,
    );
    // Another class's name, whatever its case.
    for taken in [&b"H100"[..], b"h100", b"rtx 4090"] {
        refused(
            &mut f,
            &authority,
            2,
            name(taken),
            MarketError::GpuClassNameTaken,
        );
    }
    // No such class.
    refused(
        &mut f,
        &authority,
        GPU_CLASSES as u8,
        name(b"L4"),
        MarketError::UnknownGpuClass,
    );
    // Not a name: empty, spaces at an end, a control or non-ASCII byte, bytes after the end.
    let mut after_end = name(b"L4");
    after_end[5] = b'x';
    for bad in [
        [0; CLASS_NAME_LEN],
        name(b" L4"),
        name(b"L4 "),
        name(b"L4\n"),
        name("Ł4".as_bytes()),
        after_end,
    ] {
        refused(&mut f, &authority, 2, bad, MarketError::BadGpuClassName);
    }
}
