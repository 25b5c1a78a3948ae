//! The builders of a lease's life: `allocate` starts it, `preempt` stops a spot lease for a
//! better bid, `submit_usage` proves and pays it, `end_lease` / `reclaim_escrow` settle it, and
//! `slash` spends the evidence a machine gathered.

use gpu_market::instructions::{AllocateArgs, SubmitUsageArgs};
use gpu_market::pda;
use gpu_market::state::{BidKind, Lease, Machine};
use solana_instruction::{AccountMeta, Instruction};
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use super::{ix, ClientInstruction};

pub struct Allocate<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub book: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub gpus: Vec<u8>,
    /// What the book cannot show by itself (`crate::book::allocate_evidence`): client stakes
    /// and undecidable bids. Empty in the common case, whatever the book's depth.
    pub evidence: Vec<Pubkey>,
}

impl Allocate<'_> {
    pub fn lease(&self) -> Pubkey {
        pda::lease(&self.bid).0
    }
}

impl ClientInstruction for Allocate<'_> {
    const NAME: &'static str = "allocate";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::Allocate {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                book: self.book,
                bid: self.bid,
                lease: self.lease(),
                client_stake: pda::stake(&self.market, &self.client).0,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::Allocate {
                args: AllocateArgs {
                    gpus: self.gpus.clone(),
                },
            },
        );
        i.accounts.extend(
            self.evidence
                .iter()
                .map(|k| AccountMeta::new_readonly(*k, false)),
        );
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

pub struct Preempt<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub lease_bid: Pubkey,
    pub challenger: Pubkey,
    pub challenger_client: Pubkey,
}

impl ClientInstruction for Preempt<'_> {
    const NAME: &'static str = "preempt";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Preempt {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                lease: self.lease,
                lease_bid: self.lease_bid,
                challenger: self.challenger,
                challenger_stake: pda::stake(&self.market, &self.challenger_client).0,
            },
            gpu_market::instruction::Preempt {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

pub struct SubmitUsage<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub bid: Pubkey,
    pub payment_mint: Pubkey,
    pub host_tokens: Pubkey,
    pub args: SubmitUsageArgs,
}

impl ClientInstruction for SubmitUsage<'_> {
    const NAME: &'static str = "submit_usage";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::SubmitUsage {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                lease: self.lease,
                bid: self.bid,
                payment_mint: self.payment_mint,
                payment_vault: pda::payment_vault(&self.market).0,
                host_tokens: self.host_tokens,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::SubmitUsage {
                args: self.args.clone(),
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// `end_lease` (or, with `reclaim`, `reclaim_escrow`): the final settlement of a lease.
pub struct CloseLease<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub agent: Pubkey,
    /// The machine's owner: `reclaim_escrow` slashes its stake for the silence it proves.
    pub host: Pubkey,
    /// The machine's spot book, for a preempted spot bid that goes back into it.
    pub spot_book: Option<Pubkey>,
    pub payment_mint: Pubkey,
    /// A live token account of the client for the refund (see [`crate::token::is_account_of`]);
    /// `None` when it has none (it may have closed it): the refund is then owed by its stake
    /// account (`refunds_due`, see [`crate::ClaimRefunds`]).
    pub client_tokens: Option<Pubkey>,
    pub reclaim: bool,
}

impl<'a> CloseLease<'a> {
    /// `end_lease` (or, with `reclaim`, `reclaim_escrow`) of lease `key` signed by `signer`,
    /// with the accounts its lease and machine name; the refund to `client_tokens`.
    pub fn of(
        signer: &'a (dyn Signer + Sync),
        (key, l): (Pubkey, &Lease),
        machine: &Machine,
        payment_mint: Pubkey,
        client_tokens: Option<Pubkey>,
        reclaim: bool,
    ) -> Self {
        CloseLease {
            signer,
            market: l.market,
            machine: l.machine,
            lease: key,
            bid: l.bid,
            client: l.client,
            agent: machine.agent,
            host: machine.owner,
            spot_book: (l.kind == BidKind::Spot).then_some(machine.spot_book),
            payment_mint,
            client_tokens,
            reclaim,
        }
    }
}

impl ClientInstruction for CloseLease<'_> {
    const NAME: &'static str = "end_lease";

    fn instruction(&self) -> Instruction {
        let accounts = gpu_market::accounts::CloseLease {
            signer: self.signer.pubkey(),
            market: self.market,
            machine: self.machine,
            lease: self.lease,
            bid: self.bid,
            client_stake: pda::stake(&self.market, &self.client).0,
            // Only a reclaim slashes, and never a client renting its own machine.
            host_stake: (self.reclaim && self.host != self.client)
                .then(|| pda::stake(&self.market, &self.host).0),
            spot_book: self.spot_book,
            client_tokens: self.client_tokens,
            client: self.client,
            agent: self.agent,
            payment_mint: self.payment_mint,
            payment_vault: pda::payment_vault(&self.market).0,
            token_program: spl_token_interface::ID,
        };
        if self.reclaim {
            ix(accounts, gpu_market::instruction::ReclaimEscrow {})
        } else {
            ix(accounts, gpu_market::instruction::EndLease {})
        }
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}

pub struct Slash<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub host: Pubkey,
}

impl ClientInstruction for Slash<'_> {
    const NAME: &'static str = "slash";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Slash {
                signer: self.signer.pubkey(),
                market: self.market,
                machine: self.machine,
                host_stake: pda::stake(&self.market, &self.host).0,
            },
            gpu_market::instruction::Slash {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}
