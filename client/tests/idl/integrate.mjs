// An integrator's client built from idl/gpu_market.json alone, with Anchor's TypeScript client
// (@anchor-lang/core 1.2): it decodes each kind of account the market holds and sends
// top_up_bid, place_bid, cancel_bid and allocate, passing exactly the accounts the IDL says it
// cannot derive (no seeds, no address, no relation; not the signer), as the client's typed
// `.accounts()` asks; the client derives the rest. client/tests/idl.rs sets the market up,
// runs this, and checks the chain.
//
// Input (environment): RPC_URL, IDL (the file), MARKET, MACHINE, BID (a waiting queue bid of
// the client), CLIENT_SECRET and AGENT_SECRET (keypairs as JSON byte arrays).
// Output: one JSON object on standard output; any failure exits non-zero with its reason.

import anchor from "@anchor-lang/core";
import fs from "fs";

const { AnchorProvider, Program, Wallet, web3, BN } = anchor;
const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const keypair = (name) => web3.Keypair.fromSecretKey(Uint8Array.from(JSON.parse(env(name))));
const key = (name) => new web3.PublicKey(env(name));

const idl = JSON.parse(fs.readFileSync(env("IDL"), "utf8"));
const connection = new web3.Connection(env("RPC_URL"), "confirmed");
const client = keypair("CLIENT_SECRET");
const agent = keypair("AGENT_SECRET");
const program = new Program(idl, new AnchorProvider(connection, new Wallet(client), { commitment: "confirmed" }));
const [marketKey, machineKey, bidKey] = [key("MARKET"), key("MACHINE"), key("BID")];
const out = {};

// Every kind of account, decoded by the IDL's types.
const market = await program.account.market.fetch(marketKey);
const machine = await program.account.machine.fetch(machineKey);
const bid = await program.account.bid.fetch(bidKey);
const book = await program.account.bidBook.fetch(market.data.queueBook);
// The market's stake accounts (its key is their first field): the validator may hold others.
const stakes = await program.account.stakeAccount.all([{ memcmp: { offset: 8, bytes: marketKey.toBase58() } }]);
const [stakeKey] = web3.PublicKey.findProgramAddressSync(
  [Buffer.from(constant("STAKE")), marketKey.toBuffer(), client.publicKey.toBuffer()],
  program.programId,
);
// The book's entries follow its header, one `BookSlot` each: their layout is in the IDL.
const rawBook = await connection.getAccountInfo(market.data.queueBook);
const [bookHeader, bookSlot] = [constant("BOOK_EMPTY_SPACE"), constant("BOOK_SLOT_SIZE")].map(Number);
const entries = Array.from({ length: book.len }, (_, i) => {
  const at = bookHeader + i * bookSlot;
  return program.coder.types.decode("bookSlot", rawBook.data.subarray(at, at + bookSlot)).leaf.bid.toBase58();
});
out.decoded = {
  market_queue_book: market.data.queueBook.toBase58(),
  market_payment_mint: market.data.paymentMint.toBase58(),
  machine_gpu_count: machine.data.gpuCount,
  machine_owner: machine.data.owner.toBase58(),
  bid_price: bid.data.price.toString(),
  bid_escrow: bid.data.escrow.toString(),
  book_market: book.market.toBase58(),
  book_entries: entries,
  stakes: stakes.length,
};

// The accounts every escrow movement names: what the market account says (the IDL cannot
// derive them: they are fields of the market's data).
const escrow = {
  market: marketKey,
  paymentMint: market.data.paymentMint,
  paymentVault: market.data.paymentVault,
  clientTokens: bid.data.refundTokens,
};

// What the caller knows, by the IDL's account names; each call passes what the IDL asks of it.
const known = {
  ...escrow,
  bid: bidKey,
  machine: machineKey,
  book: market.data.queueBook,
  clientStake: stakeKey,
};
out.top_up = await program.methods.topUpBid(new BN(1000)).accounts(inputs("top_up_bid", known)).rpc();

// A second queue bid, its address derived by the client from the IDL's seeds (the `nonce`
// argument).
const nonce = new BN(7777);
const now = Math.floor(Date.now() / 1000);
const args = {
  kind: { queue: {} },
  imageRef: "registry.example/idl:v1",
  imageDigest: Array(32).fill(7),
  envHash: Array(32).fill(0),
  gpuCount: 1,
  gibPerGpu: 40,
  acceptedClasses: 1,
  overclock: [{ powerLimitW: 300, coreLockMhz: 0, memLockMhz: 0, coreOffsetMhz: 0, memOffsetMhz: 0 }],
  price: new BN(2_000_000),
  deadline: new BN(now + 2 * 3600),
  minDurationSecs: 3600,
  maxDurationSecs: 3600,
  urgencyPremium: new BN(0),
  ports: [],
  scratchGib: 0,
  cpuMilli: 0,
  memoryMib: 0,
  regions: [],
  autoPower: null,
};
const placing = program.methods.placeBid(nonce, args).accounts(inputs("place_bid", known));
const placed = (await placing.pubkeys()).bid;
out.place = await placing.rpc();
out.placed_bid = placed.toBase58();
out.placed_escrow = (await program.account.bid.fetch(placed)).data.escrow.toString();

out.cancel = await program.methods
  .cancelBid()
  .accounts(inputs("cancel_bid", { ...known, bid: placed }))
  .rpc();

// The agent starts the first bid on GPU 0; the lease's address comes from the IDL's seeds.
const agentProgram = new Program(idl, new AnchorProvider(connection, new Wallet(agent), { commitment: "confirmed" }));
const allocating = agentProgram.methods.allocate({ gpus: Buffer.from([0]) }).accounts(inputs("allocate", known));
const lease = (await allocating.pubkeys()).lease;
out.allocate = await allocating.rpc();
const leased = await program.account.lease.fetch(lease);
out.lease = lease.toBase58();
out.lease_bid = leased.bid.toBase58();
out.lease_machine = leased.machine.toBase58();

console.log(JSON.stringify(out));

/**
 * Of `known` (camelCase names), the accounts instruction `ix` needs from its caller by the IDL:
 * those it gives no seeds, address or relation for, and that are not the signing wallet; an
 * optional one not known is passed as null. Fails naming one the caller does not know.
 */
function inputs(ix, known) {
  const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
  const accounts = idl.instructions.find((i) => i.name === ix).accounts;
  const given = {};
  for (const a of accounts) {
    const name = camel(a.name);
    if (a.pda || a.address || a.relations || a.signer) continue;
    if (name in known) given[name] = known[name];
    else if (a.optional) given[name] = null;
    else throw new Error(`${ix} needs ${a.name}, which the test does not know`);
  }
  return given;
}

/** A constant of the IDL: a bytes one (a PDA seed) as its bytes, a number as its value. */
function constant(name) {
  const c = idl.constants.find((c) => c.name === name);
  if (!c) throw new Error(`the IDL has no constant ${name}`);
  const value = JSON.parse(c.value);
  return Array.isArray(value) ? Uint8Array.from(value) : value;
}
