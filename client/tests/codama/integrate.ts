// What an integrator writes against the client Codama generates from idl/gpu_market.json
// (./generated/client, made by run.mjs) on @solana/kit: it decodes each kind of account the
// market holds, the queue book's entries included, and sends top_up_bid, place_bid (the bid's
// address derived by the client from its `nonce`), cancel_bid and allocate, passing the
// accounts the generated builders cannot derive. client/tests/idl.rs checks the chain.
//
// Input (environment): RPC_URL, MARKET, MACHINE, BID (a waiting queue bid of the client),
// CLIENT_SECRET and AGENT_SECRET (keypairs as JSON byte arrays).
// Output: one JSON object on standard output, the keys of client/tests/idl/integrate.mjs's.
import {
  address,
  appendTransactionMessageInstructions,
  createKeyPairSignerFromBytes,
  createSolanaRpc,
  createTransactionMessage,
  fetchEncodedAccount,
  getBase58Decoder,
  getBase64EncodedWireTransaction,
  getBase64Encoder,
  getSignatureFromTransaction,
  pipe,
  setTransactionMessageFeePayerSigner,
  setTransactionMessageLifetimeUsingBlockhash,
  signTransactionMessageWithSigners,
  type Base58EncodedBytes,
  type Instruction,
  type KeyPairSigner,
} from '@solana/kit';
import {
  fetchBid,
  fetchBidBook,
  fetchLease,
  fetchMachine,
  fetchMarket,
  findClientStakePda,
  getAllocateInstructionAsync,
  getBidBookDecoder,
  getBookSlotDecoder,
  getCancelBidInstructionAsync,
  getPlaceBidInstructionAsync,
  getStakeAccountDecoder,
  getTopUpBidInstruction,
  parseAllocateInstruction,
  parsePlaceBidInstruction,
  BidKind,
  GPU_MARKET_PROGRAM_ADDRESS,
  STAKE_ACCOUNT_DISCRIMINATOR,
} from './generated/client';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const signer = (name: string): Promise<KeyPairSigner> =>
  createKeyPairSignerFromBytes(Uint8Array.from(JSON.parse(env(name)) as number[]));

const rpc = createSolanaRpc(env('RPC_URL'));
const client = await signer('CLIENT_SECRET');
const agent = await signer('AGENT_SECRET');
const [marketKey, machineKey, bidKey] = [address(env('MARKET')), address(env('MACHINE')), address(env('BID'))];

/** Sends `instruction` paid and signed by `payer`, and waits until the cluster confirms it. */
async function send(payer: KeyPairSigner, instruction: Instruction): Promise<string> {
  const { value: blockhash } = await rpc.getLatestBlockhash({ commitment: 'confirmed' }).send();
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayerSigner(payer, m),
    (m) => setTransactionMessageLifetimeUsingBlockhash(blockhash, m),
    (m) => appendTransactionMessageInstructions([instruction], m)
  );
  const signed = await signTransactionMessageWithSigners(message);
  const signature = getSignatureFromTransaction(signed);
  await rpc
    .sendTransaction(getBase64EncodedWireTransaction(signed), { encoding: 'base64', preflightCommitment: 'confirmed' })
    .send();
  for (let tries = 0; tries < 120; tries++) {
    const { value } = await rpc.getSignatureStatuses([signature]).send();
    const status = value[0];
    if (status?.err) throw new Error(`${signature} failed: ${JSON.stringify(status.err, (_, v) => (typeof v === 'bigint' ? v.toString() : v))}`);
    if (status?.confirmationStatus === 'confirmed' || status?.confirmationStatus === 'finalized') return signature;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${signature} was not confirmed within 30 s`);
}

// Every kind of account, decoded by the generated client.
const market = (await fetchMarket(rpc, marketKey)).data.data;
const machine = (await fetchMachine(rpc, machineKey)).data.data;
const bid = (await fetchBid(rpc, bidKey)).data.data;
const book = await fetchBidBook(rpc, market.queueBook);
// The book's entries follow its header, one `BookSlot` each: their layout is in the IDL.
const bookBytes = await fetchEncodedAccount(rpc, market.queueBook);
if (!bookBytes.exists) throw new Error('the queue book is gone');
const header = getBidBookDecoder().fixedSize;
const slot = getBookSlotDecoder();
const entries = Array.from({ length: book.data.len }, (_, i) =>
  slot.decode(bookBytes.data, header + i * slot.fixedSize)
);
// The market's stake accounts (its key is their first field): the validator may hold others.
const stakes = await rpc
  .getProgramAccounts(GPU_MARKET_PROGRAM_ADDRESS, {
    encoding: 'base64',
    filters: [
      { memcmp: { offset: 0n, bytes: base58(STAKE_ACCOUNT_DISCRIMINATOR), encoding: 'base58' } },
      { memcmp: { offset: 8n, bytes: marketKey as string as Base58EncodedBytes, encoding: 'base58' } },
    ],
  })
  .send();
const decodedStakes = stakes.map((s) => getStakeAccountDecoder().decode(getBase64Encoder().encode(s.account.data[0])));

const out: Record<string, unknown> = {
  decoded: {
    market_queue_book: market.queueBook,
    market_payment_mint: market.paymentMint,
    machine_gpu_count: machine.gpuCount,
    machine_owner: machine.owner,
    bid_price: bid.price.toString(),
    bid_escrow: bid.escrow.toString(),
    book_market: book.data.market,
    book_entries: entries.map((e) => e.leaf.bid),
    stakes: decodedStakes.filter((s) => s.market === marketKey).length,
  },
};

// The accounts every escrow movement names: what the market account says (the IDL cannot
// derive them: they are fields of the market's data).
const escrow = {
  market: marketKey,
  paymentMint: market.paymentMint,
  paymentVault: market.paymentVault,
  clientTokens: bid.refundTokens,
};
out.top_up = await send(client, getTopUpBidInstruction({ client, bid: bidKey, amount: 1000n, ...escrow }));

// A second queue bid, its address derived by the generated client from the `nonce` argument.
// The client's stake account: its address from the market and the client (`findClientStakePda`).
const [clientStake] = await findClientStakePda({ market: marketKey, client: client.address });
const now = BigInt(Math.floor(Date.now() / 1000));
const placing = await getPlaceBidInstructionAsync({
  client,
  book: market.queueBook,
  machine: machineKey,
  clientStake,
  ...escrow,
  nonce: 7777n,
  args: {
    kind: BidKind.Queue,
    imageRef: 'registry.example/codama:v1',
    imageDigest: new Uint8Array(32).fill(7),
    envHash: new Uint8Array(32),
    gpuCount: 1,
    gibPerGpu: 40,
    acceptedClasses: 1,
    overclock: [{ powerLimitW: 300, coreLockMhz: 0, memLockMhz: 0, coreOffsetMhz: 0, memOffsetMhz: 0 }],
    price: 2_000_000n,
    maxDurationSecs: 3600,
    minDurationSecs: 3600,
    deadline: now + 7200n,
    urgencyPremium: 0n,
    ports: [],
    scratchGib: 0,
    cpuMilli: 0,
    memoryMib: 0,
    regions: [],
    autoPower: null,
  },
});
const placed = parsePlaceBidInstruction(placing).accounts.bid.address;
out.place = await send(client, placing);
out.placed_bid = placed;
out.placed_escrow = (await fetchBid(rpc, placed, { commitment: 'confirmed' })).data.data.escrow.toString();
out.cancel = await send(
  client,
  await getCancelBidInstructionAsync({ client, bid: placed, book: market.queueBook, ...escrow })
);

// The agent starts the first bid on GPU 0; the lease's address comes from the IDL's seeds.
const allocating = await getAllocateInstructionAsync({
  agent,
  market: marketKey,
  machine: machineKey,
  book: market.queueBook,
  bid: bidKey,
  clientStake: (await findClientStakePda({ market: marketKey, client: bid.client }))[0],
  gpus: new Uint8Array([0]),
});
const lease = parseAllocateInstruction(allocating).accounts.lease.address;
out.allocate = await send(agent, allocating);
const leased = (await fetchLease(rpc, lease, { commitment: 'confirmed' })).data;
out.lease = lease;
out.lease_bid = leased.bid;
out.lease_machine = leased.machine;

console.log(JSON.stringify(out));

/** `bytes` in base58, as a memcmp filter takes them. */
function base58(bytes: Uint8Array): Base58EncodedBytes {
  return getBase58Decoder().decode(bytes) as Base58EncodedBytes;
}
