//! A machine whose host cannot confine a lease to a GiB slice of a GPU (no NVIDIA MPS) leases
//! its GPUs whole: its agent says so (`set_whole_gpus`), and the program then offers no GPU that
//! holds a lease to another. On the SBF build in LiteSVM.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::state::Machine;
use gpu_market_sdk::SetWholeGpus;
use lease_fixture::*;
use solana_signer::Signer;

/// Before, a lease of 8 GiB of a 24 GiB GPU was allocated beside another on a machine whose
/// agent could not confine either to its slice; the agent then refused it (its client refunded,
/// the bid never run). Now the agent says its GPUs go whole, and the program never puts a
/// second lease on a GPU that holds one there.
#[test]
fn a_machine_whose_agent_cannot_confine_slices_leases_each_gpu_to_one_lease() {
    let mut f = fixture();
    let set = |f: &mut Fixture, signer: &solana_keypair::Keypair, whole: bool| {
        let machine = f.machine;
        f.ctx.run(&SetWholeGpus {
            agent: signer,
            machine,
            whole,
        })
    };
    // Only the machine's agent says it.
    let stranger = f.ctx.wallet(1);
    let err = set(&mut f, &stranger, true).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    assert_eq!(f.ctx.account::<Machine>(&f.machine).whole_gpus, 0);
    let agent = f.agent.insecure_clone();
    assert_ne!(agent.pubkey(), stranger.pubkey());
    set(&mut f, &agent, true).expect("set_whole_gpus");
    assert_eq!(f.ctx.account::<Machine>(&f.machine).whole_gpus, 1);

    // Two clients' bids of 8 GiB of one 24 GiB GPU: the first takes GPU 0 alone; the second
    // cannot join it (refused, moving nothing) and takes GPU 1.
    let (a, b) = (f.client(100 * TOKEN, 0), f.client(100 * TOKEN, 0));
    let args = f.queue_args(1, 8);
    let first = f.place(&a, args);
    let args = f.queue_args(1, 8);
    let second = f.place(&b, args);
    f.allocate(first, &[0]).expect("the first slice");
    let ledger = f.ledger(&b);
    let err = f.allocate(second, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpuCannotServe));
    assert_eq!(f.ledger(&b), ledger, "a refused allocation moves nothing");
    f.allocate(second, &[1]).expect("a GPU of its own");

    // Once its host can confine slices again (the agent says so), GPUs are shared as before.
    set(&mut f, &agent, false).expect("set_whole_gpus");
    let c = f.client(100 * TOKEN, 0);
    let args = f.queue_args(1, 8);
    let third = f.place(&c, args);
    f.allocate(third, &[0]).expect("a slice beside the first");
}
