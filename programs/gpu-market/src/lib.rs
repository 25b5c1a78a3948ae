//! The GPU compute spot market program. This file only dispatches; each instruction lives in
//! `instructions/<verb_noun>.rs` with its accounts, arguments, validation and handler.

#![allow(unexpected_cfgs)]

#[cfg(target_arch = "bpf")]
use solana_compiler_builtins as _;

use anchor_lang::prelude::*;

pub mod constants;
pub mod errors;
pub mod events;
pub mod instructions;
#[cfg(not(target_os = "solana"))]
pub mod pda;
pub mod state;

use instructions::*;
use state::{MachineStatus, MachineTerms, MarketParams, CLASS_NAME_LEN, REGION_LEN};

declare_id!("CVRX28QjAjZhbuQ1YaXk9sSwYx6QmfB7qmxrEguYqZAV");

#[program]
pub mod gpu_market {
    use super::*;

    /// Creates a market and its stake and payment vaults (token accounts owned by PDAs).
    pub fn init_market(ctx: Context<InitMarket>, id: u64, params: MarketParams) -> Result<()> {
        InitMarket::init_market(ctx, id, params)
    }

    /// Schedules new parameters (authority only, within bounds); they apply after the market's
    /// notice period. Running leases keep the rules they started with.
    pub fn update_market(ctx: Context<UpdateMarket>, params: MarketParams) -> Result<()> {
        UpdateMarket::update_market(ctx, params)
    }

    /// The market authority lists a region machines may declare and bids may name, at once.
    pub fn add_region(ctx: Context<UpdateMarket>, region: [u8; REGION_LEN]) -> Result<()> {
        UpdateMarket::add_region(ctx, region)
    }

    /// The market authority names a GPU class by its model, at once and once.
    pub fn name_gpu_class(
        ctx: Context<UpdateMarket>,
        class: u8,
        name: [u8; CLASS_NAME_LEN],
    ) -> Result<()> {
        UpdateMarket::name_gpu_class(ctx, class, name)
    }

    /// Applies scheduled parameters once their notice period is over (anyone may call).
    pub fn apply_market_update(ctx: Context<ApplyMarketUpdate>) -> Result<()> {
        ApplyMarketUpdate::apply_market_update(ctx)
    }

    /// Moves the protocol fees and slashed stake the market holds to its treasuries (anyone).
    pub fn collect_fees(ctx: Context<CollectFees>) -> Result<()> {
        CollectFees::collect_fees(ctx)
    }

    /// Creates the signer's stake account in a market (once; its bump is stored).
    pub fn open_stake(ctx: Context<OpenStake>) -> Result<()> {
        OpenStake::open_stake(ctx)
    }

    /// Locks `amount` stake tokens of the signer in the market's stake vault.
    pub fn stake(ctx: Context<Stake>, amount: u64) -> Result<()> {
        Stake::stake(ctx, amount)
    }

    /// Stops `amount` of the signer's stake counting in scores and starts the unstake cooldown.
    pub fn request_unstake(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
        RequestUnstake::request_unstake(ctx, amount)
    }

    /// Pays out the signer's unstaked tokens once the cooldown is over.
    pub fn withdraw_stake(ctx: Context<WithdrawStake>) -> Result<()> {
        WithdrawStake::withdraw_stake(ctx)
    }

    /// Opens the market's queue book on an account the client created (authority only).
    pub fn init_queue_book(ctx: Context<InitQueueBook>) -> Result<()> {
        InitQueueBook::init_queue_book(ctx)
    }

    /// Opens a machine's spot book on an account the client created (machine owner only).
    pub fn init_spot_book(ctx: Context<InitSpotBook>) -> Result<()> {
        InitSpotBook::init_spot_book(ctx)
    }

    /// Places a queue or spot bid: locks price × duration in escrow, scores it from the
    /// bidder's stake, deadline and requested resources, and inserts it in its book (evicting
    /// the lowest-ranked entry of a full book, refunded, when it outranks it). `nonce`, chosen
    /// by the client, tells its bids apart (the bid's address is derived from it).
    pub fn place_bid(ctx: Context<PlaceBid>, nonce: u64, args: PlaceBidArgs) -> Result<()> {
        PlaceBid::place_bid(ctx, nonce, args, 1)
    }

    /// Places a gang bid: a queue bid for `parts` machines at once (2 to `MAX_GANG_PARTS`),
    /// `args.gpu_count` GPUs on each, all allocated together (`allocate_gang`) or none. Its
    /// escrow pays for every part; its account holds each part's lease rent.
    pub fn place_gang_bid(
        ctx: Context<PlaceBid>,
        nonce: u64,
        args: PlaceBidArgs,
        parts: u8,
    ) -> Result<()> {
        PlaceBid::place_bid(ctx, nonce, args, parts)
    }

    /// Pays more urgency premium for a waiting queue bid (burnt, as at placement): it ranks
    /// again as if placed then with the premium in all, and must rank higher for it.
    pub fn boost_bid(ctx: Context<BoostBid>, premium: u64) -> Result<()> {
        BoostBid::boost_bid(ctx, premium)
    }

    /// Adds tokens to a bid's escrow.
    pub fn top_up_bid(ctx: Context<TopUpBid>, amount: u64) -> Result<()> {
        TopUpBid::top_up_bid(ctx, amount)
    }

    /// Cancels a waiting bid: out of its book, escrow refunded in full, account closed.
    pub fn cancel_bid(ctx: Context<CancelBid>) -> Result<()> {
        CancelBid::cancel_bid(ctx)
    }

    /// Removes a bid whose latest start has passed (anyone may call): escrow and rent go back to
    /// its client.
    pub fn prune_bid(ctx: Context<PruneBid>) -> Result<()> {
        PruneBid::prune_bid(ctx)
    }

    /// Registers a host's machine: its agent key, GPUs with their allowed overclock ranges and
    /// topology, price floor, electricity cost, network and the CPU and memory it gives leases.
    pub fn register_machine(
        ctx: Context<RegisterMachine>,
        id: u64,
        terms: MachineTerms,
    ) -> Result<()> {
        RegisterMachine::register_machine(ctx, id, terms)
    }

    /// Replaces a machine's declared terms (owner only).
    pub fn update_machine(ctx: Context<UpdateMachine>, terms: MachineTerms) -> Result<()> {
        UpdateMachine::update_machine(ctx, terms)
    }

    /// Declares the images a machine has cached (owner only; any time before it retires).
    pub fn set_cached_images(ctx: Context<SetCachedImages>, images: Vec<[u8; 32]>) -> Result<()> {
        SetCachedImages::set_cached_images(ctx, images)
    }

    /// Pauses, resumes or retires a machine (owner only; retiring is final).
    pub fn set_machine_status(ctx: Context<UpdateMachine>, status: MachineStatus) -> Result<()> {
        UpdateMachine::set_machine_status(ctx, status)
    }

    /// Starts a bid on the machine (signed by its agent): the program checks, from the book's own
    /// entries, that no bid ranked above it fits the machine and may run first, that the chosen
    /// GPUs serve it and stay in one topology group when they can, and creates the lease.
    pub fn allocate<'info>(ctx: Context<'info, Allocate<'info>>, args: AllocateArgs) -> Result<()> {
        Allocate::allocate(ctx, args)
    }

    /// Judges the book's entries against the machine (signed by its agent), best first, from
    /// where the machine's last walk of this book stopped, `args.entries` of them at most, and
    /// keeps how far it got: `allocate` then judges afresh only what the
    /// walk did not cover, so a book too deep to judge in one transaction still lets the machine
    /// start bids. The walk holds while the machine's offers, the reserve prices (none lower)
    /// and the book's ranks stay as it saw them. Moves no funds.
    pub fn walk_book(ctx: Context<WalkBook>, args: WalkBookArgs) -> Result<()> {
        WalkBook::walk_book(ctx, args)
    }

    /// Starts every part of a gang bid at once, each on its own machine (all or none): sent by
    /// the agent of one of them; the others must be active with a recent heartbeat.
    pub fn allocate_gang<'info>(
        ctx: Context<'info, AllocateGang<'info>>,
        args: AllocateGangArgs,
    ) -> Result<()> {
        AllocateGang::allocate_gang(ctx, args)
    }

    /// The agent of a gang's first part records the host port it published the bid's first
    /// port on: where the other parts reach it (their `MASTER_PORT`).
    pub fn set_rendezvous(ctx: Context<SetRendezvous>, port: u16) -> Result<()> {
        SetRendezvous::set_rendezvous(ctx, port)
    }

    /// Holds a machine's GPUs for the best-ranked queue bid it could run once they are free,
    /// from the earliest time they are (EASY backfilling; anyone may send it).
    pub fn reserve<'info>(ctx: Context<'info, Reserve<'info>>) -> Result<()> {
        Reserve::reserve(ctx)
    }

    /// Holds GPUs for a gang bid on each of its machines, all from the time every part fits
    /// (EASY backfilling across machines; anyone may send it).
    pub fn reserve_gang<'info>(ctx: Context<'info, ReserveGang<'info>>) -> Result<()> {
        ReserveGang::reserve_gang(ctx)
    }

    /// Clears a machine's reservation that holds nothing any more (anyone may send it).
    pub fn unreserve(ctx: Context<Unreserve>) -> Result<()> {
        Unreserve::unreserve(ctx)
    }

    /// Stops a spot lease for a bid that outranks it: a queue bid at once, a more profitable
    /// spot bid at the end of the current billing interval.
    pub fn preempt(ctx: Context<Preempt>) -> Result<()> {
        Preempt::preempt(ctx)
    }

    /// Hash-chained usage proofs of a machine's leases, each of one or more consecutive billing
    /// intervals: accrues the proven time's pay, out of each lease's escrow, to the machine.
    pub fn submit_usage<'info>(
        ctx: Context<'info, SubmitUsage<'info>>,
        proofs: Vec<UsageProofArgs>,
    ) -> Result<()> {
        SubmitUsage::submit_usage(ctx, proofs)
    }

    /// Pays a machine's owner what its proofs accrued (anyone may send it).
    pub fn claim_pay(ctx: Context<ClaimPay>) -> Result<()> {
        ClaimPay::claim_pay(ctx)
    }

    /// The client of a running lease buys `secs` more run time, paid into its escrow now; a
    /// queue lease only while no waiting bid could run on its GPUs once it ends.
    pub fn extend_lease(ctx: Context<ExtendLease>, secs: u32) -> Result<()> {
        ExtendLease::extend_lease(ctx, secs)
    }

    /// Stops a lease (client or host) and settles it once its time is proven.
    pub fn end_lease(ctx: Context<CloseLease>) -> Result<()> {
        CloseLease::end_lease(ctx)
    }

    /// Anyone ends a lease whose host went silent: the host is slashed for the silence, and
    /// the bid goes back to the queue at its rank with its remaining escrow (failover; a queue
    /// bid that can still start), or, when the client sends it with `refund`, or the bid cannot
    /// wait again, its escrow goes back to the client.
    pub fn reclaim_escrow(ctx: Context<CloseLease>, refund: bool) -> Result<()> {
        CloseLease::reclaim_escrow(ctx, refund)
    }

    /// Slashes a host's stake on the evidence its machine has gathered (anyone may call).
    pub fn slash(ctx: Context<Slash>) -> Result<()> {
        Slash::slash(ctx)
    }

    /// Pays the signer the refunds its stake account holds (escrow refunded while no token
    /// account of it was given, e.g. one it had closed).
    pub fn claim_refunds(ctx: Context<ClaimRefunds>) -> Result<()> {
        ClaimRefunds::claim_refunds(ctx)
    }

    /// Closes the signer's empty stake account (no refund left to claim); its rent goes back to
    /// the owner.
    pub fn close_stake(ctx: Context<CloseStake>) -> Result<()> {
        CloseStake::close_stake(ctx)
    }

    /// Closes a retired machine with no lease, and its empty spot book; rent to the owner.
    pub fn close_machine(ctx: Context<CloseMachine>) -> Result<()> {
        CloseMachine::close_machine(ctx)
    }

    /// Closes the market's empty queue book; rent to the authority.
    pub fn close_queue_book(ctx: Context<CloseQueueBook>) -> Result<()> {
        CloseQueueBook::close_queue_book(ctx)
    }

    /// Stores the bid's environment sealed to one machine's agent key (the client's).
    pub fn seal_env(ctx: Context<SealEnv>, recipient: Pubkey, sealed: Vec<u8>) -> Result<()> {
        SealEnv::seal_env(ctx, recipient, sealed)
    }

    /// Closes a sealed environment (its client; anyone once the bid is gone); rent to the
    /// client.
    pub fn close_sealed_env(ctx: Context<CloseSealedEnv>) -> Result<()> {
        CloseSealedEnv::close_sealed_env(ctx)
    }

    /// The agent's liveness signal.
    pub fn heartbeat(ctx: Context<Heartbeat>) -> Result<()> {
        Heartbeat::heartbeat(ctx)
    }

    /// The machine's agent says whether its host can confine a lease to a GiB slice of a GPU
    /// (`whole`: it cannot, and no GPU holding a lease is offered to another).
    pub fn set_whole_gpus(ctx: Context<SetWholeGpus>, whole: bool) -> Result<()> {
        SetWholeGpus::set_whole_gpus(ctx, whole)
    }

    /// The machine's agent reports a fatal GPU fault (an Xid error the driver calls fatal): the
    /// machine is paused and the fault kept for its owner, who resumes it with
    /// `set_machine_status` once the GPU is serviced.
    pub fn report_fault(ctx: Context<ReportFault>, gpu: u8, xid: u32) -> Result<()> {
        ReportFault::report_fault(ctx, gpu, xid)
    }
}
