//! One client struct per program instruction: it knows its accounts, its data and its signers.
//! A lease's instructions are in [`lease`].

use anchor_lang::{InstructionData, ToAccountMetas};
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{MachineStatus, MachineTerms, MarketParams, BOOK_EMPTY_SPACE};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

mod boost;
mod lease;
mod reserve;

pub use boost::*;
pub use lease::*;
pub use reserve::*;

pub trait ClientInstruction {
    const NAME: &'static str;
    fn instruction(&self) -> Instruction;
    fn signers(&self) -> Vec<&dyn Signer>;
}

fn ix(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction {
        program_id: gpu_market::ID,
        accounts: accounts.to_account_metas(None),
        data: data.data(),
    }
}

pub struct InitMarket<'a> {
    pub authority: &'a (dyn Signer + Sync),
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub treasury: Pubkey,
    pub stake_treasury: Pubkey,
    /// Tells one authority's markets apart (the market's address is derived from it).
    pub id: u64,
    pub params: MarketParams,
}

impl InitMarket<'_> {
    pub fn market(&self) -> Pubkey {
        pda::market(&self.authority.pubkey(), self.id).0
    }
}

impl ClientInstruction for InitMarket<'_> {
    const NAME: &'static str = "init_market";

    fn instruction(&self) -> Instruction {
        let market = self.market();
        ix(
            gpu_market::accounts::InitMarket {
                authority: self.authority.pubkey(),
                market,
                stake_mint: self.stake_mint,
                payment_mint: self.payment_mint,
                stake_vault: pda::stake_vault(&market).0,
                payment_vault: pda::payment_vault(&market).0,
                treasury: self.treasury,
                stake_treasury: self.stake_treasury,
                token_program: spl_token_interface::ID,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::InitMarket {
                id: self.id,
                params: self.params,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.authority]
    }
}

pub struct OpenStake<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
}

impl ClientInstruction for OpenStake<'_> {
    const NAME: &'static str = "open_stake";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::OpenStake {
                owner: self.owner.pubkey(),
                market: self.market,
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::OpenStake {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct Stake<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub stake_mint: Pubkey,
    pub owner_tokens: Pubkey,
    pub amount: u64,
}

impl ClientInstruction for Stake<'_> {
    const NAME: &'static str = "stake";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Stake {
                owner: self.owner.pubkey(),
                market: self.market,
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
                stake_mint: self.stake_mint,
                owner_tokens: self.owner_tokens,
                stake_vault: pda::stake_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::Stake {
                amount: self.amount,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct RequestUnstake<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub amount: u64,
}

impl ClientInstruction for RequestUnstake<'_> {
    const NAME: &'static str = "request_unstake";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::RequestUnstake {
                owner: self.owner.pubkey(),
                market: self.market,
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
            },
            gpu_market::instruction::RequestUnstake {
                amount: self.amount,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct WithdrawStake<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub stake_mint: Pubkey,
    pub owner_tokens: Pubkey,
}

impl ClientInstruction for WithdrawStake<'_> {
    const NAME: &'static str = "withdraw_stake";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::WithdrawStake {
                owner: self.owner.pubkey(),
                market: self.market,
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
                stake_mint: self.stake_mint,
                owner_tokens: self.owner_tokens,
                stake_vault: pda::stake_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::WithdrawStake {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct RegisterMachine<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub id: u64,
    pub terms: MachineTerms,
}

impl RegisterMachine<'_> {
    pub fn machine(&self) -> Pubkey {
        pda::machine(&self.market, &self.owner.pubkey(), self.id).0
    }
}

impl ClientInstruction for RegisterMachine<'_> {
    const NAME: &'static str = "register_machine";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::RegisterMachine {
                owner: self.owner.pubkey(),
                market: self.market,
                host_stake: pda::stake(&self.market, &self.owner.pubkey()).0,
                machine: self.machine(),
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::RegisterMachine {
                id: self.id,
                terms: self.terms.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct UpdateMachine<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    /// The machine's spot book (`Machine::spot_book`): the program needs it, empty, to change
    /// the electricity cost; `None` otherwise.
    pub spot_book: Option<Pubkey>,
    pub terms: MachineTerms,
}

impl ClientInstruction for UpdateMachine<'_> {
    const NAME: &'static str = "update_machine";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::UpdateMachine {
                owner: self.owner.pubkey(),
                machine: self.machine,
                market: self.market,
                spot_book: self.spot_book,
            },
            gpu_market::instruction::UpdateMachine {
                terms: self.terms.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

/// Declares the images a machine has cached (`set_cached_images`), in place of those before.
pub struct SetCachedImages<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub machine: Pubkey,
    pub images: Vec<[u8; 32]>,
}

impl ClientInstruction for SetCachedImages<'_> {
    const NAME: &'static str = "set_cached_images";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::SetCachedImages {
                owner: self.owner.pubkey(),
                machine: self.machine,
            },
            gpu_market::instruction::SetCachedImages {
                images: self.images.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct SetMachineStatus<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub status: MachineStatus,
}

impl ClientInstruction for SetMachineStatus<'_> {
    const NAME: &'static str = "set_machine_status";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::UpdateMachine {
                owner: self.owner.pubkey(),
                machine: self.machine,
                market: self.market,
                spot_book: None,
            },
            gpu_market::instruction::SetMachineStatus {
                status: self.status,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

pub struct Heartbeat<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub machine: Pubkey,
}

impl ClientInstruction for Heartbeat<'_> {
    const NAME: &'static str = "heartbeat";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Heartbeat {
                agent: self.agent.pubkey(),
                machine: self.machine,
            },
            gpu_market::instruction::Heartbeat {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// The machine's agent says whether its host can confine a lease to a GiB slice of a GPU
/// (`whole`: it cannot, and the program offers no GPU holding a lease to another).
pub struct SetWholeGpus<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub machine: Pubkey,
    pub whole: bool,
}

impl ClientInstruction for SetWholeGpus<'_> {
    const NAME: &'static str = "set_whole_gpus";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::SetWholeGpus {
                agent: self.agent.pubkey(),
                machine: self.machine,
            },
            gpu_market::instruction::SetWholeGpus { whole: self.whole },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// The machine's agent reports a fatal fault of GPU `gpu` (Xid `xid`): the program pauses the
/// machine and keeps the fault for its owner.
pub struct ReportFault<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub machine: Pubkey,
    pub gpu: u8,
    pub xid: u32,
}

impl ClientInstruction for ReportFault<'_> {
    const NAME: &'static str = "report_fault";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::ReportFault {
                agent: self.agent.pubkey(),
                machine: self.machine,
            },
            gpu_market::instruction::ReportFault {
                gpu: self.gpu,
                xid: self.xid,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

pub struct UpdateMarket<'a> {
    pub authority: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub params: MarketParams,
}

impl ClientInstruction for UpdateMarket<'_> {
    const NAME: &'static str = "update_market";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::UpdateMarket {
                authority: self.authority.pubkey(),
                market: self.market,
            },
            gpu_market::instruction::UpdateMarket {
                params: self.params,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.authority]
    }
}

/// The market authority lists a region machines may declare and bids may name.
pub struct AddRegion<'a> {
    pub authority: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub region: [u8; gpu_market::state::REGION_LEN],
}

impl ClientInstruction for AddRegion<'_> {
    const NAME: &'static str = "add_region";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::UpdateMarket {
                authority: self.authority.pubkey(),
                market: self.market,
            },
            gpu_market::instruction::AddRegion {
                region: self.region,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.authority]
    }
}

/// `name_gpu_class`: the market authority names GPU class `class` by its model, once.
pub struct NameGpuClass<'a> {
    pub authority: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub class: u8,
    pub name: [u8; gpu_market::state::CLASS_NAME_LEN],
}

impl ClientInstruction for NameGpuClass<'_> {
    const NAME: &'static str = "name_gpu_class";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::UpdateMarket {
                authority: self.authority.pubkey(),
                market: self.market,
            },
            gpu_market::instruction::NameGpuClass {
                class: self.class,
                name: self.name,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.authority]
    }
}

/// Instructions that create an empty book account (`BOOK_EMPTY_SPACE` bytes, owned by the
/// program; it grows by one slot per waiting bid, paid by that bid) and open it as a market's
/// queue book or a machine's spot book. `rent_lamports`: the empty account's rent-exempt minimum.
pub fn open_book_instructions(
    payer: &Pubkey,
    book: &Pubkey,
    rent_lamports: u64,
    open: Instruction,
) -> [Instruction; 2] {
    [
        solana_system_interface::instruction::create_account(
            payer,
            book,
            rent_lamports,
            BOOK_EMPTY_SPACE as u64,
            &gpu_market::ID,
        ),
        open,
    ]
}

pub fn init_queue_book(authority: &Pubkey, market: &Pubkey, book: &Pubkey) -> Instruction {
    ix(
        gpu_market::accounts::InitQueueBook {
            authority: *authority,
            market: *market,
            book: *book,
        },
        gpu_market::instruction::InitQueueBook {},
    )
}

pub fn init_spot_book(owner: &Pubkey, machine: &Pubkey, book: &Pubkey) -> Instruction {
    ix(
        gpu_market::accounts::InitSpotBook {
            owner: *owner,
            machine: *machine,
            book: *book,
        },
        gpu_market::instruction::InitSpotBook {},
    )
}

pub struct PlaceBid<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub book: Pubkey,
    /// A spot bid's machine; a queue bid's witness, an active machine it fits once that
    /// machine's leases are gone ([`crate::placement::witness`] finds one).
    pub machine: Pubkey,
    pub payment_mint: Pubkey,
    pub client_tokens: Pubkey,
    /// Chosen by the client so one client can hold several bids (the bid's address is derived
    /// from it).
    pub nonce: u64,
    pub args: PlaceBidArgs,
    /// The lowest-ranked entry of a full book, which the bid evicts (`crate::book::eviction`).
    pub evict: Option<Evict>,
}

/// A bid a new bid evicts from a full book, and where its refund goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evict {
    pub bid: Pubkey,
    pub client: Pubkey,
    /// A live token account of `client` for the payment mint (the bid's `refund_tokens`, see
    /// [`crate::token::is_account_of`]); `None` when it is gone: the refund is then owed by the
    /// client's stake account (`refunds_due`).
    pub tokens: Option<Pubkey>,
}

impl PlaceBid<'_> {
    pub fn bid(&self) -> Pubkey {
        pda::bid(&self.market, &self.client.pubkey(), self.nonce).0
    }
}

impl ClientInstruction for PlaceBid<'_> {
    const NAME: &'static str = "place_bid";

    fn instruction(&self) -> Instruction {
        let other = self.evict.filter(|e| e.client != self.client.pubkey());
        ix(
            gpu_market::accounts::PlaceBid {
                client: self.client.pubkey(),
                market: self.market,
                bid: self.bid(),
                book: self.book,
                machine: self.machine,
                client_stake: pda::stake(&self.market, &self.client.pubkey()).0,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
                system_program: solana_system_interface::program::ID,
                evicted: self.evict.map(|e| e.bid),
                // A bidder evicting its own entry: its own accounts stand for the evicted
                // client's (one account is never passed twice).
                evicted_client: other.map(|e| e.client),
                evicted_tokens: other.and_then(|e| e.tokens),
                evicted_stake: other.map(|e| pda::stake(&self.market, &e.client).0),
            },
            gpu_market::instruction::PlaceBid {
                nonce: self.nonce,
                args: self.args.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}

/// `place_gang_bid`: `place` for `parts` machines at once, `place.args.gpu_count` GPUs on each.
pub struct PlaceGangBid<'a> {
    pub place: PlaceBid<'a>,
    pub parts: u8,
}

impl ClientInstruction for PlaceGangBid<'_> {
    const NAME: &'static str = "place_gang_bid";

    fn instruction(&self) -> Instruction {
        let mut i = self.place.instruction();
        i.data = gpu_market::instruction::PlaceGangBid {
            nonce: self.place.nonce,
            args: self.place.args.clone(),
            parts: self.parts,
        }
        .data();
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        self.place.signers()
    }
}

pub struct TopUpBid<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub bid: Pubkey,
    pub payment_mint: Pubkey,
    pub client_tokens: Pubkey,
    pub amount: u64,
}

impl ClientInstruction for TopUpBid<'_> {
    const NAME: &'static str = "top_up_bid";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::TopUpBid {
                client: self.client.pubkey(),
                market: self.market,
                bid: self.bid,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::TopUpBid {
                amount: self.amount,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}

pub struct CancelBid<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub bid: Pubkey,
    pub book: Pubkey,
    pub payment_mint: Pubkey,
    pub client_tokens: Pubkey,
}

impl ClientInstruction for CancelBid<'_> {
    const NAME: &'static str = "cancel_bid";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CancelBid {
                client: self.client.pubkey(),
                market: self.market,
                bid: self.bid,
                book: self.book,
                client_stake: pda::stake(&self.market, &self.client.pubkey()).0,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::CancelBid {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}

/// Removes a bid whose latest start has passed, or a spot bid of a retired machine; anyone may send
/// it.
pub struct PruneBid<'a> {
    pub caller: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub book: Pubkey,
    pub payment_mint: Pubkey,
    /// A live token account of the bid's client for the payment mint (the bid's
    /// `refund_tokens`); `None` when it is gone: the escrow is then owed by the client's stake
    /// account (`refunds_due`, see [`ClaimRefunds`]).
    pub client_tokens: Option<Pubkey>,
    /// A spot bid's machine, which lets its bid go before its latest start once retired; `None`
    /// for a bid that has expired (or a queue bid).
    pub machine: Option<Pubkey>,
}

impl ClientInstruction for PruneBid<'_> {
    const NAME: &'static str = "prune_bid";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::PruneBid {
                caller: self.caller.pubkey(),
                market: self.market,
                bid: self.bid,
                client: self.client,
                book: self.book,
                client_stake: pda::stake(&self.market, &self.client).0,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
                machine: self.machine,
            },
            gpu_market::instruction::PruneBid {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.caller]
    }
}

/// Applies a market's scheduled parameters once their notice is over; anyone may send it.
pub struct ApplyMarketUpdate<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
}

impl ClientInstruction for ApplyMarketUpdate<'_> {
    const NAME: &'static str = "apply_market_update";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::ApplyMarketUpdate {
                signer: self.signer.pubkey(),
                market: self.market,
            },
            gpu_market::instruction::ApplyMarketUpdate {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}

/// Moves the fees and slashed stake a market holds to its treasuries; anyone may send it.
pub struct CollectFees<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub payment_mint: Pubkey,
    pub stake_mint: Pubkey,
    pub treasury: Pubkey,
    pub stake_treasury: Pubkey,
}

impl ClientInstruction for CollectFees<'_> {
    const NAME: &'static str = "collect_fees";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CollectFees {
                signer: self.signer.pubkey(),
                market: self.market,
                payment_mint: self.payment_mint,
                stake_mint: self.stake_mint,
                payment_vault: pda::payment_vault(&self.market).0,
                stake_vault: pda::stake_vault(&self.market).0,
                treasury: self.treasury,
                stake_treasury: self.stake_treasury,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::CollectFees {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}

/// Pays the owner's refunds due (escrow refunded while no token account of it was given) into
/// `owner_tokens`, its account of the payment mint.
pub struct ClaimRefunds<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub payment_mint: Pubkey,
    pub owner_tokens: Pubkey,
}

impl ClientInstruction for ClaimRefunds<'_> {
    const NAME: &'static str = "claim_refunds";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::ClaimRefunds {
                owner: self.owner.pubkey(),
                market: self.market,
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
                payment_mint: self.payment_mint,
                owner_tokens: self.owner_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::ClaimRefunds {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

/// Closes the signer's empty stake account in `market`.
pub struct CloseStake<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
}

impl ClientInstruction for CloseStake<'_> {
    const NAME: &'static str = "close_stake";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CloseStake {
                owner: self.owner.pubkey(),
                stake: pda::stake(&self.market, &self.owner.pubkey()).0,
            },
            gpu_market::instruction::CloseStake {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

/// Closes a retired machine (and its empty spot book, when it has one).
pub struct CloseMachine<'a> {
    pub owner: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub spot_book: Option<Pubkey>,
}

impl ClientInstruction for CloseMachine<'_> {
    const NAME: &'static str = "close_machine";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CloseMachine {
                owner: self.owner.pubkey(),
                machine: self.machine,
                market: self.market,
                spot_book: self.spot_book,
                host_stake: pda::stake(&self.market, &self.owner.pubkey()).0,
            },
            gpu_market::instruction::CloseMachine {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.owner]
    }
}

/// Closes a market's empty queue book.
pub struct CloseQueueBook<'a> {
    pub authority: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub book: Pubkey,
}

impl ClientInstruction for CloseQueueBook<'_> {
    const NAME: &'static str = "close_queue_book";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CloseQueueBook {
                authority: self.authority.pubkey(),
                market: self.market,
                book: self.book,
            },
            gpu_market::instruction::CloseQueueBook {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.authority]
    }
}

/// Stores a bid's environment sealed to one machine's agent key (see
/// `gpu_market_sdk::envelope::Environment`); the bid's client signs and pays the rent.
pub struct SealEnv<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub bid: Pubkey,
    pub recipient: Pubkey,
    pub sealed: Vec<u8>,
}

impl ClientInstruction for SealEnv<'_> {
    const NAME: &'static str = "seal_env";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::SealEnv {
                client: self.client.pubkey(),
                bid: self.bid,
                sealed_env: pda::sealed_env(&self.bid, &self.recipient).0,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::SealEnv {
                recipient: self.recipient,
                sealed: self.sealed.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}

/// Closes a sealed environment, its rent to the bid's client: the client at any time, anyone
/// once the bid is closed.
pub struct CloseSealedEnv<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub bid: Pubkey,
    pub client: Pubkey,
    pub recipient: Pubkey,
}

impl ClientInstruction for CloseSealedEnv<'_> {
    const NAME: &'static str = "close_sealed_env";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::CloseSealedEnv {
                signer: self.signer.pubkey(),
                sealed_env: pda::sealed_env(&self.bid, &self.recipient).0,
                bid: self.bid,
                client: self.client,
            },
            gpu_market::instruction::CloseSealedEnv {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}
