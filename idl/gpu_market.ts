/**
 * Program IDL in camelCase format in order to be used in JS/TS.
 *
 * Note that this is only a type helper and is not the actual IDL. The original
 * IDL can be found at `target/idl/gpu_market.json`.
 */
export type GpuMarket = {
  "address": "CVRX28QjAjZhbuQ1YaXk9sSwYx6QmfB7qmxrEguYqZAV",
  "metadata": {
    "name": "gpuMarket",
    "version": "0.1.0",
    "spec": "0.1.0",
    "description": "GPU compute spot market: stakes, bids with escrow, host machines, allocation and settlement"
  },
  "instructions": [
    {
      "name": "addRegion",
      "docs": [
        "The market authority lists a region machines may declare and bids may name, at once."
      ],
      "discriminator": [
        75,
        137,
        22,
        135,
        149,
        88,
        91,
        34
      ],
      "accounts": [
        {
          "name": "authority",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "region",
          "type": {
            "array": [
              "u8",
              16
            ]
          }
        }
      ]
    },
    {
      "name": "allocate",
      "docs": [
        "Starts a bid on the machine (signed by its agent): the program checks, from the book's own",
        "entries, that no bid ranked above it fits the machine and may run first, that the chosen",
        "GPUs serve it and stay in one topology group when they can, and creates the lease."
      ],
      "discriminator": [
        64,
        38,
        189,
        129,
        24,
        157,
        82,
        136
      ],
      "accounts": [
        {
          "name": "agent",
          "docs": [
            "The machine's agent; pays the lease's rent and gets it back when the lease closes."
          ],
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "book",
          "docs": [
            "The market's queue book (queue bids) or the machine's spot book (spot bids)."
          ],
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "lease",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  108,
                  101,
                  97,
                  115,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "bid"
              }
            ]
          }
        },
        {
          "name": "clientStake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "bid.data.client",
                "account": "bid"
              }
            ]
          }
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": [
        {
          "name": "args",
          "type": {
            "defined": {
              "name": "allocateArgs"
            }
          }
        }
      ]
    },
    {
      "name": "allocateGang",
      "docs": [
        "Starts every part of a gang bid at once, each on its own machine (all or none): sent by",
        "the agent of one of them; the others must be active with a recent heartbeat."
      ],
      "discriminator": [
        104,
        160,
        47,
        178,
        171,
        168,
        180,
        101
      ],
      "accounts": [
        {
          "name": "agent",
          "docs": [
            "The agent of one of the gang's machines; pays the parts' lease rent, and gets it back at",
            "once from the bid's account, which holds it since `place_gang_bid`."
          ],
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "book",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "clientStake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "bid.data.client",
                "account": "bid"
              }
            ]
          }
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": [
        {
          "name": "args",
          "type": {
            "defined": {
              "name": "allocateGangArgs"
            }
          }
        }
      ]
    },
    {
      "name": "applyMarketUpdate",
      "docs": [
        "Applies scheduled parameters once their notice period is over (anyone may call)."
      ],
      "discriminator": [
        186,
        153,
        27,
        224,
        152,
        201,
        143,
        212
      ],
      "accounts": [
        {
          "name": "signer",
          "docs": [
            "Anyone: the change was announced and its notice is over."
          ],
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "boostBid",
      "docs": [
        "Pays more urgency premium for a waiting queue bid (burnt, as at placement): it ranks",
        "again as if placed then with the premium in all, and must rank higher for it."
      ],
      "discriminator": [
        181,
        182,
        173,
        224,
        87,
        168,
        105,
        165
      ],
      "accounts": [
        {
          "name": "client",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "clientStake",
          "docs": [
            "The client's stake: the score counts it as it is now."
          ],
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "client"
              }
            ]
          }
        },
        {
          "name": "book",
          "docs": [
            "The market's queue book, where the bid moves up."
          ],
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": [
        {
          "name": "premium",
          "type": "u64"
        }
      ]
    },
    {
      "name": "cancelBid",
      "docs": [
        "Cancels a waiting bid: out of its book, escrow refunded in full, account closed."
      ],
      "discriminator": [
        40,
        243,
        190,
        217,
        208,
        253,
        86,
        206
      ],
      "accounts": [
        {
          "name": "client",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "book",
          "docs": [
            "The book the bid waits in."
          ],
          "writable": true
        },
        {
          "name": "clientStake",
          "docs": [
            "The client's stake (unlocked by one waiting bid)."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "client"
              }
            ]
          }
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    },
    {
      "name": "claimPay",
      "docs": [
        "Pays a machine's owner what its proofs accrued (anyone may send it)."
      ],
      "discriminator": [
        3,
        14,
        62,
        91,
        214,
        252,
        4,
        91
      ],
      "accounts": [
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "hostTokens",
          "docs": [
            "Where the host is paid: a payment-token account of the machine's owner."
          ],
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    },
    {
      "name": "claimRefunds",
      "docs": [
        "Pays the signer the refunds its stake account holds (escrow refunded while no token",
        "account of it was given, e.g. one it had closed)."
      ],
      "discriminator": [
        231,
        9,
        121,
        194,
        28,
        156,
        38,
        226
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "stake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "ownerTokens",
          "docs": [
            "A payment-token account of the owner: receives every refund due."
          ],
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    },
    {
      "name": "closeMachine",
      "docs": [
        "Closes a retired machine with no lease, and its empty spot book; rent to the owner."
      ],
      "discriminator": [
        253,
        233,
        141,
        191,
        14,
        165,
        254,
        163
      ],
      "accounts": [
        {
          "name": "owner",
          "writable": true,
          "signer": true
        },
        {
          "name": "machine",
          "docs": [
            "A retired machine with no lease left and its pay claimed."
          ],
          "writable": true
        },
        {
          "name": "market",
          "docs": [
            "The machine's market: evidence left on the machine is slashed before it closes."
          ],
          "writable": true
        },
        {
          "name": "spotBook",
          "docs": [
            "The machine's spot book, when it has one: it closes with the machine, once empty."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "hostStake",
          "docs": [
            "The owner's stake: the machine's bond is released."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "machine.data.market",
                "account": "machine"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        }
      ],
      "args": []
    },
    {
      "name": "closeQueueBook",
      "docs": [
        "Closes the market's empty queue book; rent to the authority."
      ],
      "discriminator": [
        129,
        213,
        41,
        66,
        45,
        90,
        125,
        32
      ],
      "accounts": [
        {
          "name": "authority",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "book",
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "closeSealedEnv",
      "docs": [
        "Closes a sealed environment (its client; anyone once the bid is gone); rent to the",
        "client."
      ],
      "discriminator": [
        253,
        48,
        202,
        211,
        249,
        24,
        20,
        107
      ],
      "accounts": [
        {
          "name": "signer",
          "docs": [
            "The bid's client at any time; anyone once the bid is gone."
          ],
          "signer": true
        },
        {
          "name": "sealedEnv",
          "writable": true
        },
        {
          "name": "bid",
          "relations": [
            "sealedEnv"
          ]
        },
        {
          "name": "client",
          "writable": true,
          "relations": [
            "sealedEnv"
          ]
        }
      ],
      "args": []
    },
    {
      "name": "closeStake",
      "docs": [
        "Closes the signer's empty stake account (no refund left to claim); its rent goes back to",
        "the owner."
      ],
      "discriminator": [
        92,
        229,
        76,
        76,
        25,
        26,
        189,
        239
      ],
      "accounts": [
        {
          "name": "owner",
          "writable": true,
          "signer": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "stake",
          "docs": [
            "Only an empty stake: nothing staked or pending, no waiting bid, no GPU held, no machine",
            "registered, and no refund left to claim (closing would strand it in the vault: claim it",
            "first)."
          ],
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "collectFees",
      "docs": [
        "Moves the protocol fees and slashed stake the market holds to its treasuries (anyone)."
      ],
      "discriminator": [
        164,
        152,
        207,
        99,
        30,
        186,
        19,
        182
      ],
      "accounts": [
        {
          "name": "signer",
          "docs": [
            "Anyone: the tokens can only go to the market's own treasury accounts."
          ],
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "paymentMint",
          "docs": [
            "Its supply falls by what is burnt."
          ],
          "writable": true
        },
        {
          "name": "stakeMint"
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "stakeVault",
          "writable": true
        },
        {
          "name": "treasury",
          "writable": true
        },
        {
          "name": "stakeTreasury",
          "docs": [
            "The treasury itself when both mints are one (`market init`'s default)."
          ],
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    },
    {
      "name": "endLease",
      "docs": [
        "Stops a lease (client or host) and settles it once its time is proven."
      ],
      "discriminator": [
        103,
        185,
        73,
        192,
        161,
        29,
        161,
        186
      ],
      "accounts": [
        {
          "name": "signer",
          "signer": true
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "lease"
          ]
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "lease",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "clientStake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "lease.client",
                "account": "lease"
              }
            ]
          }
        },
        {
          "name": "spotBook",
          "docs": [
            "The machine's spot book: a preempted spot bid goes back into it."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "queueBook",
          "docs": [
            "The market's queue book: a queue bid whose host went silent goes back into it",
            "(failover, `reclaim_escrow`)."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "hostStake",
          "docs": [
            "The host's stake (the machine owner's), slashed by `reclaim_escrow` for the silence it",
            "proves; never the client's own stake account."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "clientTokens",
          "docs": [
            "A payment-token account of the client for the unspent escrow. Absent (its client may",
            "have closed it), the refund stays in the vault, owed by the client's stake account",
            "(`refunds_due`, taken with `claim_refunds`): no client can keep a lease from settling."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "client",
          "docs": [
            "Gets the bid account's rent back when the bid closes."
          ],
          "writable": true
        },
        {
          "name": "agent",
          "docs": [
            "Gets the lease account's rent back (the agent paid it)."
          ],
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    },
    {
      "name": "extendLease",
      "docs": [
        "The client of a running lease buys `secs` more run time, paid into its escrow now; a",
        "queue lease only while no waiting bid could run on its GPUs once it ends."
      ],
      "discriminator": [
        116,
        215,
        250,
        78,
        13,
        228,
        203,
        63
      ],
      "accounts": [
        {
          "name": "client",
          "signer": true,
          "relations": [
            "lease"
          ]
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "lease"
          ]
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "lease",
          "writable": true
        },
        {
          "name": "queueBook",
          "docs": [
            "The market's queue book: a queue lease is extended only while no bid waiting there could",
            "run on its GPUs once it ends."
          ]
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": [
        {
          "name": "secs",
          "type": "u32"
        }
      ]
    },
    {
      "name": "heartbeat",
      "docs": [
        "The agent's liveness signal."
      ],
      "discriminator": [
        202,
        104,
        56,
        6,
        240,
        170,
        63,
        134
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "initMarket",
      "docs": [
        "Creates a market and its stake and payment vaults (token accounts owned by PDAs)."
      ],
      "discriminator": [
        33,
        253,
        15,
        116,
        89,
        25,
        127,
        236
      ],
      "accounts": [
        {
          "name": "authority",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  114,
                  107,
                  101,
                  116
                ]
              },
              {
                "kind": "account",
                "path": "authority"
              },
              {
                "kind": "arg",
                "path": "id"
              }
            ]
          }
        },
        {
          "name": "stakeMint",
          "docs": [
            "Mints without a freeze authority: nobody can freeze the market's vaults and stop every",
            "payment and withdrawal."
          ]
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "stakeVault",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101,
                  95,
                  118,
                  97,
                  117,
                  108,
                  116
                ]
              },
              {
                "kind": "account",
                "path": "market"
              }
            ]
          }
        },
        {
          "name": "paymentVault",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  112,
                  97,
                  121,
                  109,
                  101,
                  110,
                  116,
                  95,
                  118,
                  97,
                  117,
                  108,
                  116
                ]
              },
              {
                "kind": "account",
                "path": "market"
              }
            ]
          }
        },
        {
          "name": "treasury"
        },
        {
          "name": "stakeTreasury",
          "docs": [
            "Receives slashed host stake."
          ]
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": [
        {
          "name": "id",
          "type": "u64"
        },
        {
          "name": "params",
          "type": {
            "defined": {
              "name": "marketParams"
            }
          }
        }
      ]
    },
    {
      "name": "initQueueBook",
      "docs": [
        "Opens the market's queue book on an account the client created (authority only)."
      ],
      "discriminator": [
        85,
        133,
        143,
        240,
        38,
        87,
        125,
        167
      ],
      "accounts": [
        {
          "name": "authority",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "book",
          "docs": [
            "Created by the system program in the same transaction; its key signs, so an account",
            "created (and paid for) earlier cannot be claimed by someone else's `init`."
          ],
          "writable": true,
          "signer": true
        }
      ],
      "args": []
    },
    {
      "name": "initSpotBook",
      "docs": [
        "Opens a machine's spot book on an account the client created (machine owner only)."
      ],
      "discriminator": [
        108,
        5,
        53,
        111,
        157,
        20,
        110,
        153
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  99,
                  104,
                  105,
                  110,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "machine.data.market",
                "account": "machine"
              },
              {
                "kind": "account",
                "path": "owner"
              },
              {
                "kind": "account",
                "path": "machine.data.id",
                "account": "machine"
              }
            ]
          }
        },
        {
          "name": "book",
          "docs": [
            "As for the queue book: its key signs."
          ],
          "writable": true,
          "signer": true
        }
      ],
      "args": []
    },
    {
      "name": "nameGpuClass",
      "docs": [
        "The market authority names a GPU class by its model, at once and once."
      ],
      "discriminator": [
        67,
        41,
        196,
        10,
        125,
        134,
        143,
        30
      ],
      "accounts": [
        {
          "name": "authority",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "class",
          "type": "u8"
        },
        {
          "name": "name",
          "type": {
            "array": [
              "u8",
              16
            ]
          }
        }
      ]
    },
    {
      "name": "openStake",
      "docs": [
        "Creates the signer's stake account in a market (once; its bump is stored)."
      ],
      "discriminator": [
        136,
        215,
        163,
        130,
        234,
        194,
        229,
        229
      ],
      "accounts": [
        {
          "name": "owner",
          "writable": true,
          "signer": true
        },
        {
          "name": "market"
        },
        {
          "name": "stake",
          "docs": [
            "Created once per (market, owner); its bump is searched here, once, and stored."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": []
    },
    {
      "name": "placeBid",
      "docs": [
        "Places a queue or spot bid: locks price × duration in escrow, scores it from the",
        "bidder's stake, deadline and requested resources, and inserts it in its book (evicting",
        "the lowest-ranked entry of a full book, refunded, when it outranks it). `nonce`, chosen",
        "by the client, tells its bids apart (the bid's address is derived from it)."
      ],
      "discriminator": [
        238,
        77,
        148,
        91,
        200,
        151,
        92,
        146
      ],
      "accounts": [
        {
          "name": "client",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "docs": [
            "The new bid's account, created by the handler rather than by `init`: one",
            "`create_account` pays its rent and its slot's in the book (`PlaceBid::create_bid`)."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  98,
                  105,
                  100
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "client"
              },
              {
                "kind": "arg",
                "path": "nonce"
              }
            ]
          }
        },
        {
          "name": "book",
          "docs": [
            "The queue book of the market, or the spot book of `machine`."
          ],
          "writable": true
        },
        {
          "name": "machine",
          "docs": [
            "The target of a spot bid; for a queue bid, its witness: an active machine it could run",
            "on once that machine's leases are gone (any one; the client finds it), so that no bid",
            "that fits no machine waits in the book, counts as demand or outranks one that fits."
          ]
        },
        {
          "name": "clientStake",
          "docs": [
            "The client's stake account (opened with `open_stake`; its amount may be zero): S of",
            "the score, and the client's GPU count for the anti-monopoly cap. A stake account exists",
            "only at its address (`open_stake` creates it there), so its own `market` and `owner`",
            "name it as surely as its seeds, for 1.6k fewer compute units than deriving them."
          ],
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        },
        {
          "name": "evicted",
          "docs": [
            "Only when the book is full: its lowest-ranked bid, which the new bid evicts (if it",
            "outranks it) with its escrow, less its holding charge, and its rent back to that bid's client."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedClient",
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedTokens",
          "docs": [
            "A token account of the evicted bid's client for the payment mint: gets its escrow.",
            "Absent (that client may have closed it), the escrow is owed by its stake account",
            "(`refunds_due`): no client can make its bid unevictable."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedStake",
          "docs": [
            "The evicted bid's client's stake account; absent when that client is the bidder. Never",
            "the bidder's own: both are written back at the end, and the second write would undo the",
            "first (the bidder's open bids)."
          ],
          "writable": true,
          "optional": true
        }
      ],
      "args": [
        {
          "name": "nonce",
          "type": "u64"
        },
        {
          "name": "args",
          "type": {
            "defined": {
              "name": "placeBidArgs"
            }
          }
        }
      ]
    },
    {
      "name": "placeGangBid",
      "docs": [
        "Places a gang bid: a queue bid for `parts` machines at once (2 to `MAX_GANG_PARTS`),",
        "`args.gpu_count` GPUs on each, all allocated together (`allocate_gang`) or none. Its",
        "escrow pays for every part; its account holds each part's lease rent."
      ],
      "discriminator": [
        131,
        206,
        75,
        186,
        25,
        206,
        53,
        245
      ],
      "accounts": [
        {
          "name": "client",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "docs": [
            "The new bid's account, created by the handler rather than by `init`: one",
            "`create_account` pays its rent and its slot's in the book (`PlaceBid::create_bid`)."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  98,
                  105,
                  100
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "client"
              },
              {
                "kind": "arg",
                "path": "nonce"
              }
            ]
          }
        },
        {
          "name": "book",
          "docs": [
            "The queue book of the market, or the spot book of `machine`."
          ],
          "writable": true
        },
        {
          "name": "machine",
          "docs": [
            "The target of a spot bid; for a queue bid, its witness: an active machine it could run",
            "on once that machine's leases are gone (any one; the client finds it), so that no bid",
            "that fits no machine waits in the book, counts as demand or outranks one that fits."
          ]
        },
        {
          "name": "clientStake",
          "docs": [
            "The client's stake account (opened with `open_stake`; its amount may be zero): S of",
            "the score, and the client's GPU count for the anti-monopoly cap. A stake account exists",
            "only at its address (`open_stake` creates it there), so its own `market` and `owner`",
            "name it as surely as its seeds, for 1.6k fewer compute units than deriving them."
          ],
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        },
        {
          "name": "evicted",
          "docs": [
            "Only when the book is full: its lowest-ranked bid, which the new bid evicts (if it",
            "outranks it) with its escrow, less its holding charge, and its rent back to that bid's client."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedClient",
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedTokens",
          "docs": [
            "A token account of the evicted bid's client for the payment mint: gets its escrow.",
            "Absent (that client may have closed it), the escrow is owed by its stake account",
            "(`refunds_due`): no client can make its bid unevictable."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "evictedStake",
          "docs": [
            "The evicted bid's client's stake account; absent when that client is the bidder. Never",
            "the bidder's own: both are written back at the end, and the second write would undo the",
            "first (the bidder's open bids)."
          ],
          "writable": true,
          "optional": true
        }
      ],
      "args": [
        {
          "name": "nonce",
          "type": "u64"
        },
        {
          "name": "args",
          "type": {
            "defined": {
              "name": "placeBidArgs"
            }
          }
        },
        {
          "name": "parts",
          "type": "u8"
        }
      ]
    },
    {
      "name": "preempt",
      "docs": [
        "Stops a spot lease for a bid that outranks it: a queue bid at once, a more profitable",
        "spot bid at the end of the current billing interval."
      ],
      "discriminator": [
        163,
        191,
        83,
        108,
        87,
        24,
        75,
        237
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "market"
        },
        {
          "name": "machine",
          "relations": [
            "lease"
          ]
        },
        {
          "name": "lease",
          "writable": true
        },
        {
          "name": "leaseBid"
        },
        {
          "name": "challenger",
          "docs": [
            "The waiting bid that wants the lease's GPUs."
          ]
        },
        {
          "name": "challengerStake",
          "docs": [
            "The challenger's client stake (for the anti-monopoly cap)."
          ],
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "challenger.data.client",
                "account": "bid"
              }
            ]
          }
        }
      ],
      "args": []
    },
    {
      "name": "pruneBid",
      "docs": [
        "Removes a bid whose latest start has passed (anyone may call): escrow and rent go back to",
        "its client."
      ],
      "discriminator": [
        16,
        87,
        54,
        126,
        219,
        100,
        86,
        222
      ],
      "accounts": [
        {
          "name": "caller",
          "docs": [
            "Whoever sends it (a keeper, an agent, the client): pays only the fee."
          ],
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "client",
          "writable": true
        },
        {
          "name": "book",
          "docs": [
            "The book the bid waits in."
          ],
          "writable": true
        },
        {
          "name": "clientStake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "bid.data.client",
                "account": "bid"
              }
            ]
          }
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "docs": [
            "A token account of the bid's client for the payment mint: receives the escrow. Absent",
            "(its client may have closed it), the escrow is owed by the client's stake account",
            "(`refunds_due`): no client can make its expired bid unprunable."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        },
        {
          "name": "machine",
          "docs": [
            "A spot bid's machine: once retired, its waiting spot bids may be removed before their",
            "deadlines, so that the machine can always be closed."
          ],
          "optional": true
        }
      ],
      "args": []
    },
    {
      "name": "reclaimEscrow",
      "docs": [
        "Anyone ends a lease whose host went silent: the host is slashed for the silence, and",
        "the bid goes back to the queue at its rank with its remaining escrow (failover; a queue",
        "bid that can still start), or, when the client sends it with `refund`, or the bid cannot",
        "wait again, its escrow goes back to the client."
      ],
      "discriminator": [
        176,
        139,
        187,
        224,
        9,
        247,
        207,
        234
      ],
      "accounts": [
        {
          "name": "signer",
          "signer": true
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "lease"
          ]
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "lease",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "clientStake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "lease.client",
                "account": "lease"
              }
            ]
          }
        },
        {
          "name": "spotBook",
          "docs": [
            "The machine's spot book: a preempted spot bid goes back into it."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "queueBook",
          "docs": [
            "The market's queue book: a queue bid whose host went silent goes back into it",
            "(failover, `reclaim_escrow`)."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "hostStake",
          "docs": [
            "The host's stake (the machine owner's), slashed by `reclaim_escrow` for the silence it",
            "proves; never the client's own stake account."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "clientTokens",
          "docs": [
            "A payment-token account of the client for the unspent escrow. Absent (its client may",
            "have closed it), the refund stays in the vault, owed by the client's stake account",
            "(`refunds_due`, taken with `claim_refunds`): no client can keep a lease from settling."
          ],
          "writable": true,
          "optional": true
        },
        {
          "name": "client",
          "docs": [
            "Gets the bid account's rent back when the bid closes."
          ],
          "writable": true
        },
        {
          "name": "agent",
          "docs": [
            "Gets the lease account's rent back (the agent paid it)."
          ],
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": [
        {
          "name": "refund",
          "type": "bool"
        }
      ]
    },
    {
      "name": "registerMachine",
      "docs": [
        "Registers a host's machine: its agent key, GPUs with their allowed overclock ranges and",
        "topology, price floor, electricity cost, network and the CPU and memory it gives leases."
      ],
      "discriminator": [
        168,
        160,
        68,
        209,
        28,
        151,
        41,
        17
      ],
      "accounts": [
        {
          "name": "owner",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "hostStake",
          "docs": [
            "The host's stake: slashable evidence needs something to slash. Each machine bonds",
            "`min_host_stake` of it until the machine is closed."
          ],
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        },
        {
          "name": "machine",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  99,
                  104,
                  105,
                  110,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              },
              {
                "kind": "arg",
                "path": "id"
              }
            ]
          }
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": [
        {
          "name": "id",
          "type": "u64"
        },
        {
          "name": "terms",
          "type": {
            "defined": {
              "name": "machineTerms"
            }
          }
        }
      ]
    },
    {
      "name": "reportFault",
      "docs": [
        "The machine's agent reports a fatal GPU fault (an Xid error the driver calls fatal): the",
        "machine is paused and the fault kept for its owner, who resumes it with",
        "`set_machine_status` once the GPU is serviced."
      ],
      "discriminator": [
        157,
        41,
        238,
        215,
        248,
        106,
        98,
        222
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "gpu",
          "type": "u8"
        },
        {
          "name": "xid",
          "type": "u32"
        }
      ]
    },
    {
      "name": "requestUnstake",
      "docs": [
        "Stops `amount` of the signer's stake counting in scores and starts the unstake cooldown."
      ],
      "discriminator": [
        44,
        154,
        110,
        253,
        160,
        202,
        54,
        34
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "stake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        }
      ],
      "args": [
        {
          "name": "amount",
          "type": "u64"
        }
      ]
    },
    {
      "name": "reserve",
      "docs": [
        "Holds a machine's GPUs for the best-ranked queue bid it could run once they are free,",
        "from the earliest time they are (EASY backfilling; anyone may send it)."
      ],
      "discriminator": [
        92,
        99,
        244,
        209,
        28,
        65,
        213,
        157
      ],
      "accounts": [
        {
          "name": "market"
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "queueBook"
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "previous",
          "docs": [
            "The machine the bid is reserved on now (`bid.reserved_on`), when that is another one:",
            "its reservation moves here only for an earlier start. A machine its host has closed",
            "holds nothing."
          ],
          "writable": true,
          "optional": true
        }
      ],
      "args": []
    },
    {
      "name": "reserveGang",
      "docs": [
        "Holds GPUs for a gang bid on each of its machines, all from the time every part fits",
        "(EASY backfilling across machines; anyone may send it)."
      ],
      "discriminator": [
        79,
        5,
        150,
        212,
        239,
        162,
        78,
        79
      ],
      "accounts": [
        {
          "name": "market"
        },
        {
          "name": "queueBook"
        },
        {
          "name": "bid",
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "sealEnv",
      "docs": [
        "Stores the bid's environment sealed to one machine's agent key (the client's)."
      ],
      "discriminator": [
        28,
        13,
        40,
        250,
        71,
        109,
        107,
        43
      ],
      "accounts": [
        {
          "name": "client",
          "writable": true,
          "signer": true
        },
        {
          "name": "bid"
        },
        {
          "name": "sealedEnv",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  101,
                  97,
                  108,
                  101,
                  100,
                  95,
                  101,
                  110,
                  118
                ]
              },
              {
                "kind": "account",
                "path": "bid"
              },
              {
                "kind": "arg",
                "path": "recipient"
              }
            ]
          }
        },
        {
          "name": "systemProgram",
          "address": "11111111111111111111111111111111"
        }
      ],
      "args": [
        {
          "name": "recipient",
          "type": "pubkey"
        },
        {
          "name": "sealed",
          "type": "bytes"
        }
      ]
    },
    {
      "name": "setCachedImages",
      "docs": [
        "Declares the images a machine has cached (owner only; any time before it retires)."
      ],
      "discriminator": [
        116,
        114,
        206,
        40,
        161,
        71,
        209,
        252
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  99,
                  104,
                  105,
                  110,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "machine.data.market",
                "account": "machine"
              },
              {
                "kind": "account",
                "path": "owner"
              },
              {
                "kind": "account",
                "path": "machine.data.id",
                "account": "machine"
              }
            ]
          }
        }
      ],
      "args": [
        {
          "name": "images",
          "type": {
            "vec": {
              "array": [
                "u8",
                32
              ]
            }
          }
        }
      ]
    },
    {
      "name": "setMachineStatus",
      "docs": [
        "Pauses, resumes or retires a machine (owner only; retiring is final)."
      ],
      "discriminator": [
        5,
        99,
        204,
        43,
        86,
        73,
        134,
        241
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  99,
                  104,
                  105,
                  110,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "machine.data.market",
                "account": "machine"
              },
              {
                "kind": "account",
                "path": "owner"
              },
              {
                "kind": "account",
                "path": "machine.data.id",
                "account": "machine"
              }
            ]
          }
        },
        {
          "name": "market",
          "docs": [
            "Counts the GPUs its active machines offer."
          ],
          "writable": true
        },
        {
          "name": "spotBook",
          "docs": [
            "The machine's spot book, needed (empty) to change its electricity cost: the keys of",
            "waiting spot bids are the host's profit at the cost they were placed under."
          ],
          "optional": true
        }
      ],
      "args": [
        {
          "name": "status",
          "type": {
            "defined": {
              "name": "machineStatus"
            }
          }
        }
      ]
    },
    {
      "name": "setRendezvous",
      "docs": [
        "The agent of a gang's first part records the host port it published the bid's first",
        "port on: where the other parts reach it (their `MASTER_PORT`)."
      ],
      "discriminator": [
        162,
        219,
        150,
        145,
        0,
        115,
        147,
        1
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "machine"
        },
        {
          "name": "lease",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "port",
          "type": "u16"
        }
      ]
    },
    {
      "name": "setWholeGpus",
      "docs": [
        "The machine's agent says whether its host can confine a lease to a GiB slice of a GPU",
        "(`whole`: it cannot, and no GPU holding a lease is offered to another)."
      ],
      "discriminator": [
        227,
        108,
        31,
        19,
        166,
        46,
        176,
        170
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "whole",
          "type": "bool"
        }
      ]
    },
    {
      "name": "slash",
      "docs": [
        "Slashes a host's stake on the evidence its machine has gathered (anyone may call)."
      ],
      "discriminator": [
        204,
        141,
        18,
        161,
        8,
        177,
        92,
        142
      ],
      "accounts": [
        {
          "name": "signer",
          "docs": [
            "Anyone: slashing follows from the evidence on the machine, not from a decision."
          ],
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "hostStake",
          "writable": true
        }
      ],
      "args": []
    },
    {
      "name": "stake",
      "docs": [
        "Locks `amount` stake tokens of the signer in the market's stake vault."
      ],
      "discriminator": [
        206,
        176,
        202,
        18,
        200,
        209,
        179,
        108
      ],
      "accounts": [
        {
          "name": "owner",
          "writable": true,
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "stake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        },
        {
          "name": "stakeMint"
        },
        {
          "name": "ownerTokens",
          "writable": true
        },
        {
          "name": "stakeVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": [
        {
          "name": "amount",
          "type": "u64"
        }
      ]
    },
    {
      "name": "submitUsage",
      "docs": [
        "Hash-chained usage proofs of a machine's leases, each of one or more consecutive billing",
        "intervals: accrues the proven time's pay, out of each lease's escrow, to the machine."
      ],
      "discriminator": [
        116,
        86,
        49,
        61,
        36,
        25,
        122,
        200
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "market"
        },
        {
          "name": "machine",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "proofs",
          "type": {
            "vec": {
              "defined": {
                "name": "usageProofArgs"
              }
            }
          }
        }
      ]
    },
    {
      "name": "topUpBid",
      "docs": [
        "Adds tokens to a bid's escrow."
      ],
      "discriminator": [
        166,
        77,
        80,
        87,
        98,
        175,
        133,
        62
      ],
      "accounts": [
        {
          "name": "client",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        },
        {
          "name": "bid",
          "writable": true
        },
        {
          "name": "paymentMint"
        },
        {
          "name": "clientTokens",
          "writable": true
        },
        {
          "name": "paymentVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": [
        {
          "name": "amount",
          "type": "u64"
        }
      ]
    },
    {
      "name": "unreserve",
      "docs": [
        "Clears a machine's reservation that holds nothing any more (anyone may send it)."
      ],
      "discriminator": [
        8,
        81,
        183,
        252,
        134,
        134,
        101,
        105
      ],
      "accounts": [
        {
          "name": "market"
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "bid",
          "docs": [
            "(a closed bid is gone)."
          ]
        }
      ],
      "args": []
    },
    {
      "name": "updateMachine",
      "docs": [
        "Replaces a machine's declared terms (owner only)."
      ],
      "discriminator": [
        107,
        38,
        205,
        118,
        194,
        110,
        169,
        123
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true
        },
        {
          "name": "machine",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  109,
                  97,
                  99,
                  104,
                  105,
                  110,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "machine.data.market",
                "account": "machine"
              },
              {
                "kind": "account",
                "path": "owner"
              },
              {
                "kind": "account",
                "path": "machine.data.id",
                "account": "machine"
              }
            ]
          }
        },
        {
          "name": "market",
          "docs": [
            "Counts the GPUs its active machines offer."
          ],
          "writable": true
        },
        {
          "name": "spotBook",
          "docs": [
            "The machine's spot book, needed (empty) to change its electricity cost: the keys of",
            "waiting spot bids are the host's profit at the cost they were placed under."
          ],
          "optional": true
        }
      ],
      "args": [
        {
          "name": "terms",
          "type": {
            "defined": {
              "name": "machineTerms"
            }
          }
        }
      ]
    },
    {
      "name": "updateMarket",
      "docs": [
        "Schedules new parameters (authority only, within bounds); they apply after the market's",
        "notice period. Running leases keep the rules they started with."
      ],
      "discriminator": [
        153,
        39,
        2,
        197,
        179,
        50,
        199,
        217
      ],
      "accounts": [
        {
          "name": "authority",
          "signer": true
        },
        {
          "name": "market",
          "writable": true
        }
      ],
      "args": [
        {
          "name": "params",
          "type": {
            "defined": {
              "name": "marketParams"
            }
          }
        }
      ]
    },
    {
      "name": "walkBook",
      "docs": [
        "Judges the book's entries against the machine (signed by its agent), best first, from",
        "where the machine's last walk of this book stopped, `args.entries` of them at most, and",
        "keeps how far it got: `allocate` then judges afresh only what the",
        "walk did not cover, so a book too deep to judge in one transaction still lets the machine",
        "start bids. The walk holds while the machine's offers, the reserve prices (none lower)",
        "and the book's ranks stay as it saw them. Moves no funds."
      ],
      "discriminator": [
        18,
        81,
        164,
        123,
        196,
        204,
        205,
        125
      ],
      "accounts": [
        {
          "name": "agent",
          "signer": true
        },
        {
          "name": "market"
        },
        {
          "name": "machine",
          "writable": true
        },
        {
          "name": "book",
          "docs": [
            "The market's queue book or the machine's spot book."
          ]
        }
      ],
      "args": [
        {
          "name": "args",
          "type": {
            "defined": {
              "name": "walkBookArgs"
            }
          }
        }
      ]
    },
    {
      "name": "withdrawStake",
      "docs": [
        "Pays out the signer's unstaked tokens once the cooldown is over."
      ],
      "discriminator": [
        153,
        8,
        22,
        138,
        105,
        176,
        87,
        66
      ],
      "accounts": [
        {
          "name": "owner",
          "signer": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "market",
          "writable": true,
          "relations": [
            "stake"
          ]
        },
        {
          "name": "stake",
          "writable": true,
          "pda": {
            "seeds": [
              {
                "kind": "const",
                "value": [
                  115,
                  116,
                  97,
                  107,
                  101
                ]
              },
              {
                "kind": "account",
                "path": "market"
              },
              {
                "kind": "account",
                "path": "owner"
              }
            ]
          }
        },
        {
          "name": "stakeMint"
        },
        {
          "name": "ownerTokens",
          "writable": true
        },
        {
          "name": "stakeVault",
          "writable": true
        },
        {
          "name": "tokenProgram",
          "address": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        }
      ],
      "args": []
    }
  ],
  "accounts": [
    {
      "name": "bid",
      "discriminator": [
        143,
        246,
        48,
        245,
        42,
        145,
        180,
        88
      ]
    },
    {
      "name": "bidBook",
      "discriminator": [
        182,
        97,
        57,
        49,
        241,
        83,
        113,
        20
      ]
    },
    {
      "name": "lease",
      "discriminator": [
        14,
        103,
        218,
        61,
        248,
        234,
        105,
        84
      ]
    },
    {
      "name": "machine",
      "discriminator": [
        25,
        102,
        22,
        13,
        58,
        243,
        138,
        79
      ]
    },
    {
      "name": "market",
      "discriminator": [
        219,
        190,
        213,
        55,
        0,
        227,
        198,
        154
      ]
    },
    {
      "name": "sealedEnv",
      "discriminator": [
        55,
        23,
        7,
        120,
        125,
        174,
        93,
        18
      ]
    },
    {
      "name": "stakeAccount",
      "discriminator": [
        80,
        158,
        67,
        124,
        50,
        189,
        192,
        255
      ]
    }
  ],
  "events": [
    {
      "name": "bidBoosted",
      "discriminator": [
        31,
        32,
        1,
        12,
        71,
        207,
        172,
        12
      ]
    },
    {
      "name": "bidCancelled",
      "discriminator": [
        175,
        52,
        76,
        11,
        201,
        1,
        205,
        65
      ]
    },
    {
      "name": "bidPlaced",
      "discriminator": [
        135,
        53,
        176,
        83,
        193,
        69,
        108,
        61
      ]
    },
    {
      "name": "bidReserved",
      "discriminator": [
        137,
        22,
        104,
        167,
        9,
        229,
        81,
        135
      ]
    },
    {
      "name": "bidToppedUp",
      "discriminator": [
        36,
        28,
        125,
        183,
        119,
        246,
        50,
        53
      ]
    },
    {
      "name": "feesCollected",
      "discriminator": [
        233,
        23,
        117,
        225,
        107,
        178,
        254,
        8
      ]
    },
    {
      "name": "gangRendezvous",
      "discriminator": [
        148,
        85,
        226,
        142,
        228,
        56,
        76,
        244
      ]
    },
    {
      "name": "gpuClassNamed",
      "discriminator": [
        120,
        250,
        227,
        14,
        34,
        107,
        193,
        47
      ]
    },
    {
      "name": "hostSlashed",
      "discriminator": [
        215,
        28,
        229,
        116,
        52,
        198,
        113,
        94
      ]
    },
    {
      "name": "leaseEnded",
      "discriminator": [
        72,
        213,
        85,
        72,
        232,
        231,
        130,
        177
      ]
    },
    {
      "name": "leaseExtended",
      "discriminator": [
        120,
        90,
        63,
        134,
        145,
        170,
        71,
        176
      ]
    },
    {
      "name": "leaseIdle",
      "discriminator": [
        2,
        8,
        18,
        77,
        81,
        6,
        253,
        89
      ]
    },
    {
      "name": "leaseStarted",
      "discriminator": [
        171,
        28,
        11,
        70,
        62,
        1,
        11,
        202
      ]
    },
    {
      "name": "leaseStopping",
      "discriminator": [
        158,
        195,
        144,
        40,
        241,
        164,
        201,
        206
      ]
    },
    {
      "name": "machineFaulted",
      "discriminator": [
        46,
        53,
        76,
        232,
        122,
        224,
        149,
        47
      ]
    },
    {
      "name": "machineHeartbeat",
      "discriminator": [
        72,
        108,
        69,
        127,
        53,
        63,
        150,
        159
      ]
    },
    {
      "name": "machineRegistered",
      "discriminator": [
        225,
        205,
        93,
        90,
        108,
        116,
        208,
        107
      ]
    },
    {
      "name": "machineStatusChanged",
      "discriminator": [
        107,
        142,
        236,
        11,
        169,
        160,
        130,
        61
      ]
    },
    {
      "name": "machineUpdated",
      "discriminator": [
        36,
        8,
        116,
        119,
        253,
        178,
        178,
        148
      ]
    },
    {
      "name": "machineWholeGpus",
      "discriminator": [
        71,
        175,
        22,
        106,
        210,
        230,
        214,
        48
      ]
    },
    {
      "name": "marketInitialized",
      "discriminator": [
        134,
        160,
        122,
        87,
        50,
        3,
        255,
        81
      ]
    },
    {
      "name": "marketUpdateApplied",
      "discriminator": [
        136,
        51,
        204,
        111,
        82,
        54,
        176,
        39
      ]
    },
    {
      "name": "marketUpdated",
      "discriminator": [
        170,
        51,
        74,
        147,
        116,
        168,
        217,
        251
      ]
    },
    {
      "name": "payClaimed",
      "discriminator": [
        63,
        130,
        234,
        46,
        162,
        218,
        23,
        124
      ]
    },
    {
      "name": "refundDue",
      "discriminator": [
        133,
        5,
        10,
        7,
        126,
        97,
        209,
        157
      ]
    },
    {
      "name": "refundsClaimed",
      "discriminator": [
        181,
        174,
        65,
        50,
        178,
        57,
        202,
        211
      ]
    },
    {
      "name": "regionAdded",
      "discriminator": [
        83,
        125,
        145,
        99,
        97,
        157,
        128,
        244
      ]
    },
    {
      "name": "reservationCleared",
      "discriminator": [
        42,
        94,
        250,
        232,
        24,
        86,
        247,
        222
      ]
    },
    {
      "name": "spotPreempted",
      "discriminator": [
        29,
        92,
        250,
        82,
        177,
        245,
        222,
        182
      ]
    },
    {
      "name": "stakeWithdrawn",
      "discriminator": [
        33,
        120,
        159,
        58,
        140,
        255,
        174,
        79
      ]
    },
    {
      "name": "staked",
      "discriminator": [
        11,
        146,
        45,
        205,
        230,
        58,
        213,
        240
      ]
    },
    {
      "name": "unstakeRequested",
      "discriminator": [
        21,
        253,
        177,
        85,
        129,
        206,
        42,
        152
      ]
    },
    {
      "name": "usageProven",
      "discriminator": [
        247,
        243,
        89,
        138,
        154,
        145,
        142,
        24
      ]
    }
  ],
  "errors": [
    {
      "code": 6000,
      "name": "invalidWeights",
      "msg": "score weights must add up to 10000 bps"
    },
    {
      "code": 6001,
      "name": "invalidBillingInterval",
      "msg": "the billing interval must be 1 to 3600 seconds"
    },
    {
      "code": 6002,
      "name": "invalidFee",
      "msg": "the protocol fee must be at most 1000 bps"
    },
    {
      "code": 6003,
      "name": "invalidScoreBounds",
      "msg": "the score bounds and the urgency premium share must be greater than zero, the aging cap at most 10000 bps"
    },
    {
      "code": 6004,
      "name": "invalidClientCap",
      "msg": "the anti-monopoly cap must be between 1 and 10000 bps"
    },
    {
      "code": 6005,
      "name": "invalidPricing",
      "msg": "pricing needs a base price above zero, seasonal factors above zero and smoothing of at most 10000 bps"
    },
    {
      "code": 6006,
      "name": "unknownGpuClass",
      "msg": "the GPU class is not in the market's table"
    },
    {
      "code": 6007,
      "name": "notMarketAuthority",
      "msg": "only the market's authority may do this"
    },
    {
      "code": 6008,
      "name": "zeroAmount",
      "msg": "the amount must be greater than zero"
    },
    {
      "code": 6009,
      "name": "insufficientStake",
      "msg": "the stake is smaller than the amount asked back"
    },
    {
      "code": 6010,
      "name": "nothingToWithdraw",
      "msg": "nothing is waiting to be withdrawn"
    },
    {
      "code": 6011,
      "name": "cooldownNotOver",
      "msg": "the unstake cooldown is not over"
    },
    {
      "code": 6012,
      "name": "badGpuCount",
      "msg": "a machine has 1 to 16 GPUs"
    },
    {
      "code": 6013,
      "name": "badGpuMemory",
      "msg": "a GPU's memory must be at least 1 GiB"
    },
    {
      "code": 6014,
      "name": "badOverclockRange",
      "msg": "an overclock range has its minimum above its maximum, or a zero power limit"
    },
    {
      "code": 6015,
      "name": "tooManyCachedImages",
      "msg": "a machine advertises at most 8 cached images"
    },
    {
      "code": 6016,
      "name": "machineRetired",
      "msg": "the machine is retired"
    },
    {
      "code": 6017,
      "name": "wrongAgent",
      "msg": "the signer is not the machine's agent key"
    },
    {
      "code": 6018,
      "name": "bookFull",
      "msg": "the book is full"
    },
    {
      "code": 6019,
      "name": "bookDuplicate",
      "msg": "the bid is already in the book"
    },
    {
      "code": 6020,
      "name": "bookNotFound",
      "msg": "the bid is not in the book"
    },
    {
      "code": 6021,
      "name": "wrongBook",
      "msg": "the book account does not belong to this market or machine"
    },
    {
      "code": 6022,
      "name": "bookAlreadyOpen",
      "msg": "the book is already open"
    },
    {
      "code": 6023,
      "name": "noGpuClass",
      "msg": "a bid accepts at least one GPU class of the market"
    },
    {
      "code": 6024,
      "name": "deadlineTooSoon",
      "msg": "the deadline leaves less time than the shortest run the bid accepts"
    },
    {
      "code": 6025,
      "name": "powerLimitMissing",
      "msg": "the power limit is mandatory"
    },
    {
      "code": 6026,
      "name": "overclockOutOfRange",
      "msg": "no GPU of the machine allows the bid's overclock terms"
    },
    {
      "code": 6027,
      "name": "machineNotActive",
      "msg": "the machine is not active"
    },
    {
      "code": 6028,
      "name": "imageRefTooLong",
      "msg": "the image reference is longer than 255 bytes"
    },
    {
      "code": 6029,
      "name": "bidRunning",
      "msg": "the bid is running; end its lease instead"
    },
    {
      "code": 6030,
      "name": "wrongStakeAccount",
      "msg": "the stake account is not the bidder's stake in this market"
    },
    {
      "code": 6031,
      "name": "stakeLockedByBids",
      "msg": "the stake ranks waiting bids: cancel them (or let them run) before unstaking"
    },
    {
      "code": 6032,
      "name": "invalidEnforcement",
      "msg": "idle windows and the slash evidence must be at least 1, the idle end 0 or more than the idle windows, silence at least 2 intervals; utilisation at most 10000 bps, a slash at most 5000 bps"
    },
    {
      "code": 6033,
      "name": "duplicateGpu",
      "msg": "two GPUs of the machine have the same UUID"
    },
    {
      "code": 6034,
      "name": "unknownGpu",
      "msg": "the GPU index is not one of the machine's GPUs"
    },
    {
      "code": 6035,
      "name": "badOverclockCount",
      "msg": "a bid gives one set of overclock terms, or one per GPU"
    },
    {
      "code": 6036,
      "name": "gpuCannotServe",
      "msg": "a chosen GPU cannot serve the bid (class, free memory, overclock range or price)"
    },
    {
      "code": 6037,
      "name": "topologySplit",
      "msg": "the bid fits inside one topology group: choose GPUs of one group"
    },
    {
      "code": 6038,
      "name": "clientCapReached",
      "msg": "the client would hold more than the market's anti-monopoly cap"
    },
    {
      "code": 6039,
      "name": "latestStartPassed",
      "msg": "the bid's latest start has passed (its deadline less the shortest run its client accepts)"
    },
    {
      "code": 6040,
      "name": "candidatesMissing",
      "msg": "pass the client stake of each book entry ranked above that fits, and the bid account of each entry its summary cannot decide"
    },
    {
      "code": 6041,
      "name": "betterBidFeasible",
      "msg": "a bid ranked above the chosen one is feasible on this machine"
    },
    {
      "code": 6042,
      "name": "bidNotFeasible",
      "msg": "the bid does not fit this machine now"
    },
    {
      "code": 6043,
      "name": "notSpotLease",
      "msg": "only a spot lease can be preempted"
    },
    {
      "code": 6044,
      "name": "leaseStopping",
      "msg": "the lease is already stopping"
    },
    {
      "code": 6045,
      "name": "notBetterBid",
      "msg": "the challenger does not pay the host more than the running spot bid"
    },
    {
      "code": 6046,
      "name": "staleInterval",
      "msg": "the proof's interval is not after the last proven one"
    },
    {
      "code": 6047,
      "name": "proofAccountsMismatch",
      "msg": "submit_usage takes one writable lease of the machine per proof, in the proofs' order"
    },
    {
      "code": 6048,
      "name": "intervalNotOver",
      "msg": "the proof's interval has not ended yet"
    },
    {
      "code": 6049,
      "name": "intervalAfterStop",
      "msg": "the lease had stopped before the proof's interval"
    },
    {
      "code": 6050,
      "name": "badProofGpuCount",
      "msg": "a proof gives one peak power per GPU of the lease"
    },
    {
      "code": 6051,
      "name": "notLeaseParty",
      "msg": "only the lease's client or host may end it before all of its time is proven"
    },
    {
      "code": 6052,
      "name": "hostNotSilent",
      "msg": "the host has not been silent long enough to reclaim the escrow"
    },
    {
      "code": 6053,
      "name": "nothingToReclaim",
      "msg": "the lease's time is fully proven: end it instead"
    },
    {
      "code": 6054,
      "name": "noSlashingEvidence",
      "msg": "not enough missed intervals or power violations to slash"
    },
    {
      "code": 6055,
      "name": "hostStakeTooLow",
      "msg": "the host's stake in the market is below the minimum to register a machine"
    },
    {
      "code": 6056,
      "name": "hostStakeBonded",
      "msg": "the stake backs the owner's machines (each its bond, the min_host_stake it was registered under): close a machine, once its leases are settled, to unbond its part"
    },
    {
      "code": 6057,
      "name": "machineBusy",
      "msg": "the machine has running leases"
    },
    {
      "code": 6058,
      "name": "overflow",
      "msg": "arithmetic overflow"
    },
    {
      "code": 6059,
      "name": "divisionByZero",
      "msg": "division by zero"
    },
    {
      "code": 6060,
      "name": "noGpuOfClass",
      "msg": "too few of the machine's GPUs are of a class the bid accepts"
    },
    {
      "code": 6061,
      "name": "notEnoughGpuMemory",
      "msg": "too few of the machine's GPUs have the memory the bid asks per GPU"
    },
    {
      "code": 6062,
      "name": "priceBelowFloor",
      "msg": "the price is below the host's floor"
    },
    {
      "code": 6063,
      "name": "priceBelowReserve",
      "msg": "the price is below the market's reserve price of the classes the bid accepts"
    },
    {
      "code": 6064,
      "name": "gpusBusy",
      "msg": "running leases hold the GPUs the bid needs"
    },
    {
      "code": 6065,
      "name": "bidNotExpired",
      "msg": "the bid's latest start has not passed (and it is not a spot bid of a retired machine)"
    },
    {
      "code": 6066,
      "name": "evictionMissing",
      "msg": "the book is full: pass its lowest-ranked bid, that bid's client, token account and stake to evict it"
    },
    {
      "code": 6067,
      "name": "bookFullOfBetterBids",
      "msg": "the book is full and the bid does not outrank its lowest-ranked entry"
    },
    {
      "code": 6068,
      "name": "invalidCooldown",
      "msg": "the unstake cooldown must be at most 30 days"
    },
    {
      "code": 6069,
      "name": "noUpdateDue",
      "msg": "no parameter change is scheduled, or its notice period is not over"
    },
    {
      "code": 6070,
      "name": "hostStakeMissing",
      "msg": "the host's stake account is missing, or is the client's own"
    },
    {
      "code": 6071,
      "name": "stakeNotEmpty",
      "msg": "the stake account still holds stake, waiting bids or GPUs"
    },
    {
      "code": 6072,
      "name": "machineNotRetired",
      "msg": "only a retired machine can be closed"
    },
    {
      "code": 6073,
      "name": "bookNotEmpty",
      "msg": "the book still holds bids"
    },
    {
      "code": 6074,
      "name": "deadlineTooFar",
      "msg": "the bid's latest start lets it wait longer than the market allows (its aging cap, and 7 days at most)"
    },
    {
      "code": 6075,
      "name": "mintCanFreeze",
      "msg": "a market's mints must have no freeze authority"
    },
    {
      "code": 6076,
      "name": "nothingToClaim",
      "msg": "no refund is due to this stake account"
    },
    {
      "code": 6077,
      "name": "refundsDue",
      "msg": "the stake account holds refunds due: claim them (claim_refunds) before closing it"
    },
    {
      "code": 6078,
      "name": "noEnvironment",
      "msg": "the bid has no environment (its env_hash is zero)"
    },
    {
      "code": 6079,
      "name": "sealedEnvSize",
      "msg": "a sealed environment is 1 to 800 bytes"
    },
    {
      "code": 6080,
      "name": "sealedEnvInUse",
      "msg": "only the bid's client may close its sealed environment while the bid lives"
    },
    {
      "code": 6081,
      "name": "badPorts",
      "msg": "a bid publishes at most 4 ports, each 1 to 65535 and named once"
    },
    {
      "code": 6082,
      "name": "noRoom",
      "msg": "the machine gives fewer ports or less scratch per lease, or fewer CPU cores or less memory to its leases, than the bid asks"
    },
    {
      "code": 6083,
      "name": "badNetwork",
      "msg": "the machine's network: an ASCII host name of at most 64 bytes (required with ports or an API port), at most 4 allow-list entries with egress by allow-list only, prefixes of at most 32 bits"
    },
    {
      "code": 6084,
      "name": "regionNotAccepted",
      "msg": "the machine's region is not one the bid accepts"
    },
    {
      "code": 6085,
      "name": "badRegions",
      "msg": "a bid names at most 4 regions, each a non-empty label named once"
    },
    {
      "code": 6086,
      "name": "badAutoPower",
      "msg": "auto power's throughput tolerance is at most 2,000 bps (20 %)"
    },
    {
      "code": 6087,
      "name": "noSuchGpu",
      "msg": "the machine has no such GPU"
    },
    {
      "code": 6088,
      "name": "bidShorterThanInterval",
      "msg": "a bid runs at least one billing interval"
    },
    {
      "code": 6089,
      "name": "wrongMachine",
      "msg": "the machine passed is not the bid's"
    },
    {
      "code": 6090,
      "name": "unknownRegion",
      "msg": "the region is not one the market lists (market add-region)"
    },
    {
      "code": 6091,
      "name": "regionListed",
      "msg": "the market lists this region already"
    },
    {
      "code": 6092,
      "name": "regionTableFull",
      "msg": "the market lists 32 regions, the most it can"
    },
    {
      "code": 6093,
      "name": "tooManyTermSets",
      "msg": "a bid's GPUs ask at most 2 distinct sets of overclock terms"
    },
    {
      "code": 6094,
      "name": "spotBookMissing",
      "msg": "a preempted spot bid that may wait again goes back to its machine's spot book: pass the book (settling cannot choose a refund instead)"
    },
    {
      "code": 6095,
      "name": "spotBidsWaiting",
      "msg": "spot bids wait on this machine, ranked by the host's profit at its current electricity cost: the cost can change once its spot book is empty (pause the machine; waiting spot bids run or expire), and the update must pass the book"
    },
    {
      "code": 6096,
      "name": "bookMisshapen",
      "msg": "the book account is not a whole number of entry slots"
    },
    {
      "code": 6097,
      "name": "bookRentMissing",
      "msg": "the bid account does not hold the rent of its place in the book"
    },
    {
      "code": 6098,
      "name": "payUnclaimed",
      "msg": "the machine's pay is not claimed yet: send claim_pay first"
    },
    {
      "code": 6099,
      "name": "emptyProofSpan",
      "msg": "a proof covers at least one interval"
    },
    {
      "code": 6100,
      "name": "minDurationTooLong",
      "msg": "the shortest run the bid accepts is longer than its duration"
    },
    {
      "code": 6101,
      "name": "queueBookMissing",
      "msg": "pass the market's queue book: the bid of a lease whose host went silent goes back into it"
    },
    {
      "code": 6102,
      "name": "gpusWanted",
      "msg": "a bid waiting in the queue could run on the lease's GPUs once it ends: an extension would pass it"
    },
    {
      "code": 6103,
      "name": "notQueueBid",
      "msg": "only a queue bid ranks by its score"
    },
    {
      "code": 6104,
      "name": "noHigherRank",
      "msg": "the premium would not rank the bid higher (its urgency part is full, or its client's stake fell)"
    },
    {
      "code": 6105,
      "name": "gpusReserved",
      "msg": "the machine's GPUs are reserved for a bid from a time this lease would run past: it may use only the other GPUs, and leave the reserved bid its CPU and memory"
    },
    {
      "code": 6106,
      "name": "leasesMissing",
      "msg": "pass every lease running on the machine (and only program accounts): the reservation's start is computed from their ends"
    },
    {
      "code": 6107,
      "name": "bidFitsNow",
      "msg": "the bid fits the machine now: allocate it instead"
    },
    {
      "code": 6108,
      "name": "betterBidUnreserved",
      "msg": "a bid ranked above this one could run on the machine once it is empty and no machine holds it: reserve that one first"
    },
    {
      "code": 6109,
      "name": "reservationHolds",
      "msg": "the reservation still holds: its bid waits for it, and it has not lapsed (or the new start is not earlier)"
    },
    {
      "code": 6110,
      "name": "notReservedBid",
      "msg": "the account is not the reservation's bid, or the machine holds no reservation"
    },
    {
      "code": 6111,
      "name": "badGangParts",
      "msg": "a gang bid runs on 2 to 8 machines (parts), and an ordinary bid on 1"
    },
    {
      "code": 6112,
      "name": "gangSpotBid",
      "msg": "gang bids are queue bids: a spot bid names one machine"
    },
    {
      "code": 6113,
      "name": "gangNeedsAllocateGang",
      "msg": "the bid is a gang's: allocate_gang starts all its parts at once"
    },
    {
      "code": 6114,
      "name": "notAGang",
      "msg": "allocate_gang and reserve_gang take a gang bid"
    },
    {
      "code": 6115,
      "name": "gangPartsMismatch",
      "msg": "pass one machine and its part's lease account for each of the gang's parts, each machine once, and GPUs for each part"
    },
    {
      "code": 6116,
      "name": "machineSilent",
      "msg": "the machine's agent has not sent a heartbeat within the market's silence window: no part of a gang may start there"
    },
    {
      "code": 6117,
      "name": "gangAgentMissing",
      "msg": "the signer is the agent of none of the gang's machines"
    },
    {
      "code": 6118,
      "name": "gangPartExtend",
      "msg": "a gang's parts are extended together: not one lease of it"
    },
    {
      "code": 6119,
      "name": "rendezvousSet",
      "msg": "the gang's rendezvous port is set already"
    },
    {
      "code": 6120,
      "name": "gangNeedsPort",
      "msg": "a gang bid publishes at least one port: its first is where the other parts reach the first part"
    },
    {
      "code": 6121,
      "name": "gangNeedsReserveGang",
      "msg": "the bid is a gang's: reserve_gang holds all its machines at once"
    },
    {
      "code": 6122,
      "name": "badGpuClassName",
      "msg": "a GPU class name is 1 to 16 printable ASCII bytes (spaces inside only), zero-padded"
    },
    {
      "code": 6123,
      "name": "gpuClassNamed",
      "msg": "the GPU class has a name already: a class keeps its name for the life of the market"
    },
    {
      "code": 6124,
      "name": "gpuClassNameTaken",
      "msg": "another GPU class of the market has this name (names are compared without case)"
    }
  ],
  "types": [
    {
      "name": "allocateArgs",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "gpus",
            "docs": [
              "The machine GPU that serves each of the bid's GPUs, in the bid's GPU order."
            ],
            "type": "bytes"
          }
        ]
      }
    },
    {
      "name": "allocateGangArgs",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "gpus",
            "docs": [
              "For each part, in the gang's order: the machine GPUs that serve the bid's GPUs there, in",
              "the bid's GPU order."
            ],
            "type": {
              "vec": "bytes"
            }
          }
        ]
      }
    },
    {
      "name": "bid",
      "docs": [
        "A client's bid with its escrow. Its fixed fields are [`BidData`]'s (`bid.escrow` reads",
        "through `Deref`); its kind, status and the lists it asks follow."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "data",
            "type": {
              "defined": {
                "name": "bidData"
              }
            }
          },
          {
            "name": "kind",
            "type": {
              "defined": {
                "name": "bidKind"
              }
            }
          },
          {
            "name": "status",
            "type": {
              "defined": {
                "name": "bidStatus"
              }
            }
          },
          {
            "name": "imageRef",
            "type": "string"
          },
          {
            "name": "overclock",
            "docs": [
              "One entry per GPU of the bid, or a single entry that applies to each of its GPUs (the",
              "account is sized by the entries it holds)."
            ],
            "type": {
              "vec": {
                "defined": {
                  "name": "overclockTerms"
                }
              }
            }
          },
          {
            "name": "ports",
            "docs": [
              "Container ports the lease publishes on the machine's address."
            ],
            "type": {
              "vec": "u16"
            }
          },
          {
            "name": "regions",
            "docs": [
              "The regions whose machines may run it (none: any)."
            ],
            "type": {
              "vec": {
                "array": [
                  "u8",
                  16
                ]
              }
            }
          },
          {
            "name": "autoPower",
            "docs": [
              "Auto power: the share of throughput (bps) the client lets the host trade for a lower",
              "power limit than the stated one (see [`MAX_AUTO_POWER_TOLERANCE_BPS`]); `None`: the",
              "stated limits hold as they are."
            ],
            "type": {
              "option": "u16"
            }
          }
        ]
      }
    },
    {
      "name": "bidBook",
      "docs": [
        "A bid book account's header: the queue book of a market or the spot book of one machine.",
        "Its entries follow it in the account, one [`BookSlot`] each (see [`Book`]).",
        "",
        "Not a PDA (it predates books small enough for a CPI `create_account`): the client creates the",
        "account with `BOOK_EMPTY_SPACE` bytes owned by the program, and the program initialises it",
        "through an `AccountLoader` with the `zero` constraint and [`BidBook::init`]. Its identity is",
        "therefore in its header (`market`, `kind`, `machine`), which the program checks on every use.",
        "",
        "`zero_copy(unsafe)` only because the safe form derives `::bytemuck::Pod`, which needs",
        "`bytemuck` as a direct dependency; `repr(C)` is explicit and the layout is pinned."
      ],
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "docs": [
              "The machine of a spot book; default for a queue book."
            ],
            "type": "pubkey"
          },
          {
            "name": "kind",
            "docs": [
              "`BOOK_KIND_QUEUE` or `BOOK_KIND_SPOT`; 0 until initialised."
            ],
            "type": "u8"
          },
          {
            "name": "pad0",
            "type": {
              "array": [
                "u8",
                3
              ]
            }
          },
          {
            "name": "len",
            "docs": [
              "Entries in the tree: they fill slots `0..len`."
            ],
            "type": "u32"
          },
          {
            "name": "root",
            "docs": [
              "Handle of the root, `BOOK_NIL` when empty."
            ],
            "type": "u32"
          },
          {
            "name": "pad1",
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "fullClock",
            "docs": [
              "How long the book has been full (newcomers turned away): a waiting bid pays its price",
              "for the full time it saw. See [`Book::full_secs`]."
            ],
            "type": {
              "defined": {
                "name": "fullClock"
              }
            }
          },
          {
            "name": "reserved",
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          }
        ]
      }
    },
    {
      "name": "bidBoosted",
      "docs": [
        "Its client paid `premium` more for urgency after placing it; it ranks by `score` now."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "premium",
            "type": "u64"
          },
          {
            "name": "urgencyPremium",
            "type": "u64"
          },
          {
            "name": "score",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "bidCancelled",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "refund",
            "type": "u64"
          },
          {
            "name": "reason",
            "type": {
              "defined": {
                "name": "bidRemoval"
              }
            }
          }
        ]
      }
    },
    {
      "name": "bidData",
      "docs": [
        "A bid's fixed fields. Plain old data, keys first (the agent filters bids by `market` at",
        "offset 8 and `machine` at offset 72), then widest first so that `repr(C)` adds no padding:",
        "Borsh reads and writes it as one copy (`pod_borsh!`), where the derived code took one call",
        "per field."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "docs": [
              "The machine of a spot bid; the default key for a queue bid."
            ],
            "type": "pubkey"
          },
          {
            "name": "refundTokens",
            "docs": [
              "The client's token account the escrow came from: where a keeper sends a refund (any",
              "token account of the client for the payment mint is accepted)."
            ],
            "type": "pubkey"
          },
          {
            "name": "imageDigest",
            "docs": [
              "sha256 digest of the image the bid runs."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "envHash",
            "docs": [
              "Hash of the encrypted environment (the ciphertext travels off chain, to the host only)."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "reservedOn",
            "docs": [
              "The machine whose GPUs `reserve` holds for this queue bid, or the first of a gang's",
              "(`reserve_gang`), whose reservation's start is the gang's (the machine's",
              "[`crate::state::Reservation`] says whether it still holds); default: none."
            ],
            "type": "pubkey"
          },
          {
            "name": "price",
            "docs": [
              "Per GPU-hour (queue) or per GPU-day (spot), in payment-token base units."
            ],
            "type": "u64"
          },
          {
            "name": "deadline",
            "type": "i64"
          },
          {
            "name": "escrow",
            "docs": [
              "Tokens locked in the market's payment vault for this bid: at placement, its price for",
              "its run and for the longest it may wait to start (`settlement::bid_escrow`)."
            ],
            "type": "u64"
          },
          {
            "name": "urgencyPremium",
            "docs": [
              "Paid at placement for urgency (the market's at once; never refunded)."
            ],
            "type": "u64"
          },
          {
            "name": "score",
            "docs": [
              "The weighted score at placement, or at its last boost (0..=10 000), and the book key",
              "derived from it."
            ],
            "type": "u64"
          },
          {
            "name": "bookKey",
            "type": "u64"
          },
          {
            "name": "seq",
            "docs": [
              "Placement order in the market; with `book_key` it locates the bid in its book."
            ],
            "type": "u64"
          },
          {
            "name": "placedAt",
            "type": "i64"
          },
          {
            "name": "fullSecsAtEntry",
            "docs": [
              "Its book's [`BidBook::full_secs`] when it entered: what it saw of the book's full time",
              "since is what its [`Bid::holding_charge`] counts."
            ],
            "type": "u64"
          },
          {
            "name": "maxDurationSecs",
            "type": "u32"
          },
          {
            "name": "minDurationSecs",
            "docs": [
              "The shortest run the client accepts: the bid may start until `deadline` less this",
              "([`Bid::latest_start`]), and expires then. Equal to `max_duration_secs` unless the client",
              "accepted a shorter run for a later start."
            ],
            "type": "u32"
          },
          {
            "name": "cpuMilli",
            "docs": [
              "Thousandths of a CPU core and MiB of memory the lease holds on its machine (the",
              "container's limits; 0: its GPU memory's share of the machine's, `Host::or_share`)."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "type": "u32"
          },
          {
            "name": "gibPerGpu",
            "type": "u16"
          },
          {
            "name": "scratchGib",
            "docs": [
              "GiB of scratch volume at the container's `/workspace` (0: none)."
            ],
            "type": "u16"
          },
          {
            "name": "gpuCount",
            "type": "u8"
          },
          {
            "name": "acceptedClasses",
            "docs": [
              "Bit `c` set: GPU class `c` is accepted."
            ],
            "type": "u8"
          },
          {
            "name": "bump",
            "type": "u8"
          },
          {
            "name": "parts",
            "docs": [
              "Machines a gang bid runs on at once, `gpu_count` GPUs on each (1: one machine)."
            ],
            "type": "u8"
          },
          {
            "name": "partsRunning",
            "docs": [
              "The parts of a gang bid whose leases have not settled yet (0 while it waits)."
            ],
            "type": "u8"
          },
          {
            "name": "gangFlags",
            "docs": [
              "[`GangFlags`] of a running gang bid: what its parts' settlements decided so far."
            ],
            "type": "u8"
          },
          {
            "name": "reservedRound",
            "docs": [
              "Which of the bid's reservations is current: `reserve` and `reserve_gang` count it up",
              "and stamp it on the reservations they make, and it counts up again when the bid leaves",
              "its book, so a machine's reservation of an earlier round holds nothing",
              "([`Machine::holds`]). A gang's reservation spans several machines, which one",
              "`reserved_on` cannot name."
            ],
            "type": "u16"
          },
          {
            "name": "pad",
            "docs": [
              "Brings the size to a multiple of the alignment (8), so that `repr(C)` adds no padding."
            ],
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          }
        ]
      }
    },
    {
      "name": "bidKind",
      "type": {
        "kind": "enum",
        "variants": [
          {
            "name": "queue"
          },
          {
            "name": "spot"
          }
        ]
      }
    },
    {
      "name": "bidPlaced",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "kind",
            "type": {
              "defined": {
                "name": "bidKind"
              }
            }
          },
          {
            "name": "score",
            "type": "u64"
          },
          {
            "name": "escrow",
            "type": "u64"
          },
          {
            "name": "urgencyPremium",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "bidRemoval",
      "docs": [
        "Why a waiting bid left its book with its escrow refunded."
      ],
      "type": {
        "kind": "enum",
        "variants": [
          {
            "name": "cancelled"
          },
          {
            "name": "expired"
          },
          {
            "name": "evicted"
          },
          {
            "name": "machineRetired"
          }
        ]
      }
    },
    {
      "name": "bidReserved",
      "docs": [
        "The machine's GPUs `gpus` (a mask) are held for queue bid `bid` from `start`."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "start",
            "type": "i64"
          },
          {
            "name": "gpus",
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "bidStatus",
      "type": {
        "kind": "enum",
        "variants": [
          {
            "name": "open"
          },
          {
            "name": "running"
          }
        ]
      }
    },
    {
      "name": "bidSummary",
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "price",
            "type": "u64"
          },
          {
            "name": "latestStart",
            "docs": [
              "The bid's latest start ([`crate::state::Bid::latest_start`]): it expires after it."
            ],
            "type": "i64"
          },
          {
            "name": "termsFirst",
            "docs": [
              "The bid's overclock terms, as at most two distinct sets (a bid may ask no more):",
              "`second_count` of its GPUs ask `terms_second`, the others `terms_first`",
              "(`gpu_market_core::fit::Terms::summarise`). Exact: fit does not depend on which GPU",
              "of the bid asks which."
            ],
            "type": {
              "defined": {
                "name": "overclockTerms"
              }
            }
          },
          {
            "name": "termsSecond",
            "type": {
              "defined": {
                "name": "overclockTerms"
              }
            }
          },
          {
            "name": "gibPerGpu",
            "type": "u16"
          },
          {
            "name": "gpuCount",
            "type": "u8"
          },
          {
            "name": "acceptedClasses",
            "type": "u8"
          },
          {
            "name": "secondCount",
            "docs": [
              "GPUs asking `terms_second` (0: every GPU asks `terms_first`)."
            ],
            "type": "u8"
          },
          {
            "name": "ports",
            "docs": [
              "The ports the bid publishes, and its scratch GiB (little-endian: the entry keeps its",
              "byte alignment)."
            ],
            "type": "u8"
          },
          {
            "name": "scratchGib",
            "type": {
              "array": [
                "u8",
                2
              ]
            }
          },
          {
            "name": "cpuMilli",
            "docs": [
              "The CPU (thousandths of a core) and memory (MiB) the bid's lease holds."
            ],
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "memoryMib",
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "regions",
            "docs": [
              "The regions the bid names, as bits of the market's region table (0: any)."
            ],
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "maxDurationSecs",
            "docs": [
              "The longest the bid's lease runs: with the time it starts, when it ends at the latest",
              "(what a reservation asks of a bid that would use its GPUs)."
            ],
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "parts",
            "docs": [
              "Machines the bid runs on at once ([`crate::state::Bid::parts`]): a gang's entry (more",
              "than 1) is taken by `allocate_gang` only, and never holds back `allocate`."
            ],
            "type": "u8"
          },
          {
            "name": "pad",
            "docs": [
              "Brings the size to a multiple of the alignment (8)."
            ],
            "type": {
              "array": [
                "u8",
                3
              ]
            }
          }
        ]
      }
    },
    {
      "name": "bidToppedUp",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "escrow",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "bookInner",
      "docs": [
        "A branch: leaves under `children[0]` have bit `crit_bit` clear, under `children[1]` set, and all",
        "agree on the bits above it."
      ],
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "children",
            "docs": [
              "Handles: leaf index | `LEAF_BIT`, or inner index."
            ],
            "type": {
              "array": [
                "u32",
                2
              ]
            }
          },
          {
            "name": "critBit",
            "docs": [
              "0..128, counted from the most significant bit of `!book_key ‖ seq`."
            ],
            "type": "u32"
          }
        ]
      }
    },
    {
      "name": "bookLeaf",
      "docs": [
        "One entry: a bid account, its rank, and what decides whether it fits a machine."
      ],
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "docs": [
              "The bid account this entry stands for."
            ],
            "type": "pubkey"
          },
          {
            "name": "bookKey",
            "docs": [
              "Its rank in the book, higher first: the bid's `book_key` (not its score)."
            ],
            "type": "u64"
          },
          {
            "name": "seq",
            "type": "u64"
          },
          {
            "name": "summary",
            "type": {
              "defined": {
                "name": "bidSummary"
              }
            }
          }
        ]
      }
    },
    {
      "name": "bookSlot",
      "docs": [
        "The space one entry takes in its book account: its leaf and one inner node (a tree of `n`",
        "leaves has `n - 1`; the last slot's node is unused). Slot `i` holds leaf `i` and inner node",
        "`i`, so the account grows and shrinks by one slot per entry."
      ],
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "leaf",
            "type": {
              "defined": {
                "name": "bookLeaf"
              }
            }
          },
          {
            "name": "inner",
            "type": {
              "defined": {
                "name": "bookInner"
              }
            }
          },
          {
            "name": "pad",
            "type": "u32"
          }
        ]
      }
    },
    {
      "name": "bookWalk",
      "docs": [
        "`Machine::walk`; all zero: none."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "book",
            "docs": [
              "The book walked (the market's queue book or the machine's spot book)."
            ],
            "type": "pubkey"
          },
          {
            "name": "digest",
            "docs": [
              "SHA-256 of the machine's offers when the walk began ([`BookWalk::seal_of`])."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "reserve",
            "docs": [
              "The reserve price of each class when the walk began."
            ],
            "type": {
              "array": [
                "u64",
                8
              ]
            }
          },
          {
            "name": "uptoBookKey",
            "docs": [
              "The last entry judged (its rank and placement number), in rank order."
            ],
            "type": "u64"
          },
          {
            "name": "uptoSeq",
            "type": "u64"
          },
          {
            "name": "belowSeq",
            "docs": [
              "The market's next placement number when the walk began: entries from it on are not",
              "covered."
            ],
            "type": "u64"
          },
          {
            "name": "clients",
            "docs": [
              "Clients of the entries it found fitting (the first `clients_len`)."
            ],
            "type": {
              "array": [
                "pubkey",
                4
              ]
            }
          },
          {
            "name": "clientsLen",
            "type": "u8"
          },
          {
            "name": "started",
            "docs": [
              "1 once it has judged an entry (`upto_*` is set)."
            ],
            "type": "u8"
          },
          {
            "name": "pad",
            "type": {
              "array": [
                "u8",
                6
              ]
            }
          }
        ]
      }
    },
    {
      "name": "cidr",
      "docs": [
        "An IPv4 network of an egress allow-list, e.g. 203.0.113.0/24."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "addr",
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          },
          {
            "name": "prefix",
            "type": "u8"
          }
        ]
      }
    },
    {
      "name": "classBps",
      "docs": [
        "One value in bps per GPU class."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              "u16",
              8
            ]
          }
        ]
      }
    },
    {
      "name": "classNames",
      "docs": [
        "The model name of each GPU class (e.g. H100), zero-padded; empty where none is set."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              {
                "array": [
                  "u8",
                  16
                ]
              },
              8
            ]
          }
        ]
      }
    },
    {
      "name": "egress",
      "docs": [
        "Where a lease's container may connect to. Never the host itself, cloud metadata",
        "(169.254.0.0/16) or other leases, whatever the policy (the agent's firewall)."
      ],
      "type": {
        "kind": "enum",
        "variants": [
          {
            "name": "none"
          },
          {
            "name": "allowList"
          },
          {
            "name": "open"
          }
        ]
      }
    },
    {
      "name": "feesCollected",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "fees",
            "type": "u64"
          },
          {
            "name": "slashed",
            "type": "u64"
          },
          {
            "name": "burned",
            "docs": [
              "Payment tokens burnt: urgency premiums and holding charges."
            ],
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "fullClock",
      "docs": [
        "What `allocate` needs to know of a waiting bid to tell whether it fits a machine, without",
        "its account: every input of the fit rule, and the client for the anti-monopoly cap.",
        "A clock that runs only while its book is full: the seconds of every earlier full stretch",
        "and when the current one began. A bid notes its reading on entry; the difference when it",
        "leaves is the full time it saw, which its holding charge prices."
      ],
      "serialization": "bytemuckunsafe",
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "secsBefore",
            "docs": [
              "Seconds full before the current stretch (or the last one, while not full)."
            ],
            "type": "u64"
          },
          {
            "name": "since",
            "docs": [
              "When the current full stretch began; meaningful only while full."
            ],
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "gangRendezvous",
      "docs": [
        "A gang's first part published its rendezvous: the other parts reach it at its machine's",
        "host on `port`."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "port",
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "gibTable",
      "docs": [
        "GiB of each of a machine's GPUs."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              "u16",
              16
            ]
          }
        ]
      }
    },
    {
      "name": "gpuClassNamed",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "class",
            "type": "u8"
          },
          {
            "name": "name",
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          }
        ]
      }
    },
    {
      "name": "gpuSpec",
      "docs": [
        "One GPU as its host declares it. Plain old data: Borsh reads and writes it as one copy."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "uuid",
            "docs": [
              "The GPU's UUID as NVML reports it (128 bits); unique within a machine."
            ],
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          },
          {
            "name": "class",
            "docs": [
              "Index into the market's GPU class table (e.g. 0 = H100, 1 = A100, …)."
            ],
            "type": "u8"
          },
          {
            "name": "topologyGroup",
            "docs": [
              "GPUs in one NVLink island or under one PCIe switch share a group."
            ],
            "type": "u8"
          },
          {
            "name": "memoryGib",
            "type": "u16"
          },
          {
            "name": "powerW",
            "docs": [
              "Power limit range in W: the card's minimum up to the host's maximum."
            ],
            "type": {
              "array": [
                "u16",
                2
              ]
            }
          },
          {
            "name": "coreLockMhz",
            "docs": [
              "Allowed clock locks in MHz; `[0, 0]` means the host does not allow that lock."
            ],
            "type": {
              "array": [
                "u16",
                2
              ]
            }
          },
          {
            "name": "memLockMhz",
            "type": {
              "array": [
                "u16",
                2
              ]
            }
          },
          {
            "name": "coreOffsetMhz",
            "docs": [
              "Allowed clock offsets in MHz."
            ],
            "type": {
              "array": [
                "i16",
                2
              ]
            }
          },
          {
            "name": "memOffsetMhz",
            "type": {
              "array": [
                "i16",
                2
              ]
            }
          }
        ]
      }
    },
    {
      "name": "gpuTable",
      "docs": [
        "A machine's GPUs (its `gpu_count` first)."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              {
                "defined": {
                  "name": "gpuSpec"
                }
              },
              16
            ]
          }
        ]
      }
    },
    {
      "name": "hostSlashed",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "toClient",
            "docs": [
              "The part paid to the harmed client's stake (the rest is kept for the stake treasury)."
            ],
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "hourBps",
      "docs": [
        "One value in bps per UTC hour."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              "u16",
              24
            ]
          }
        ]
      }
    },
    {
      "name": "imageTable",
      "docs": [
        "sha256 digests of a machine's cached images (its `cached_image_count` first)."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              {
                "array": [
                  "u8",
                  32
                ]
              },
              8
            ]
          }
        ]
      }
    },
    {
      "name": "lease",
      "docs": [
        "A bid running on a machine: created by `allocate`, paid by `submit_usage`, closed by",
        "`end_lease` or `reclaim_escrow`. While it runs the lease holds its bid's escrow and its proofs."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "imageDigest",
            "docs": [
              "sha256 digest of the image the lease runs (its bid's): the market's packing policy",
              "learns what an image asks of a GPU from the leases running it."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "kind",
            "type": {
              "defined": {
                "name": "bidKind"
              }
            }
          },
          {
            "name": "part",
            "docs": [
              "The lease's place in its gang (0 for the first machine, whose address the others",
              "reach) and the gang's machine count (1: not a gang's)."
            ],
            "type": "u8"
          },
          {
            "name": "parts",
            "type": "u8"
          },
          {
            "name": "rendezvousPort",
            "docs": [
              "For a gang's first part: the machine's host port its agent published the bid's first",
              "port on (`set_rendezvous`), where the other parts reach it; 0 until then."
            ],
            "type": "u16"
          },
          {
            "name": "gpuCount",
            "type": "u8"
          },
          {
            "name": "gpus",
            "docs": [
              "The machine's GPU serving each of the bid's GPUs (first `gpu_count` entries)."
            ],
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          },
          {
            "name": "gibPerGpu",
            "type": "u16"
          },
          {
            "name": "cpuMilli",
            "docs": [
              "Thousandths of a CPU core and MiB of memory the machine holds for the lease (the",
              "container's limits): what the bid asked, or its GPU memory's share of the machine's",
              "(`Host::or_share`); 0 only on a machine that gives none (its agent's per-GPU default)."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "type": "u32"
          },
          {
            "name": "powerLimitsW",
            "docs": [
              "The agreed power limit of each GPU, in W, in the bid's GPU order."
            ],
            "type": {
              "defined": {
                "name": "wattTable"
              }
            }
          },
          {
            "name": "price",
            "docs": [
              "The bid's price, in its unit (per GPU-hour for queue leases, per GPU-day for spot)."
            ],
            "type": "u64"
          },
          {
            "name": "startedAt",
            "type": "i64"
          },
          {
            "name": "endsAt",
            "docs": [
              "Start + the bid's maximum duration, capped at its deadline (the bid starts by its latest",
              "start, so this leaves at least the shortest run its client accepted) and at what its",
              "escrow pays for after a holding charge."
            ],
            "type": "i64"
          },
          {
            "name": "stopAt",
            "docs": [
              "When the lease was told to stop (`i64::MAX` while it was not): no time after it is paid."
            ],
            "type": "i64"
          },
          {
            "name": "nextInterval",
            "docs": [
              "The next proof's interval index; proofs only ever move it forward."
            ],
            "type": "u32"
          },
          {
            "name": "provenUntil",
            "docs": [
              "The end of the last proven window: time up to here is paid."
            ],
            "type": "i64"
          },
          {
            "name": "proofHash",
            "docs": [
              "sha256 of the last proof's chain preimage (zero before the first proof)."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "paid",
            "docs": [
              "Gross amount paid out of escrow (host + fee)."
            ],
            "type": "u64"
          },
          {
            "name": "escrow",
            "docs": [
              "What is left of the bid's escrow: `allocate` moves it here, each proof pays out of it,",
              "and what remains goes back to the client (or into the bid, put back in its book) when",
              "the lease settles. A proof needs the lease alone, so one transaction proves a machine's",
              "leases."
            ],
            "type": "u64"
          },
          {
            "name": "billedSecs",
            "docs": [
              "Payable seconds proven in all: pay is the cost of this total less `paid`, so no",
              "interval's rounding is ever lost."
            ],
            "type": "u64"
          },
          {
            "name": "gpuSeconds",
            "type": "u64"
          },
          {
            "name": "energyJ",
            "type": "u64"
          },
          {
            "name": "energySavedJ",
            "docs": [
              "Energy the automatic power limit saved, as the proofs state it, in J."
            ],
            "type": "u64"
          },
          {
            "name": "idleStreak",
            "type": "u16"
          },
          {
            "name": "utilisationBps",
            "docs": [
              "The average SM utilisation of the lease's GPUs over its last proven window, in basis",
              "points (0 before the first proof, which `proof_hash` tells): what the market's",
              "co-location model knows of the lease as a neighbour on a shared GPU."
            ],
            "type": "u16"
          },
          {
            "name": "idle",
            "docs": [
              "Set once `idle_intervals` consecutive proofs showed low utilisation."
            ],
            "type": "bool"
          },
          {
            "name": "violations",
            "type": "u32"
          },
          {
            "name": "preempted",
            "docs": [
              "A spot lease stopped by a better bid: its bid goes back to the book when it ends."
            ],
            "type": "bool"
          },
          {
            "name": "rules",
            "docs": [
              "The market's rules when the lease started."
            ],
            "type": {
              "defined": {
                "name": "leaseRules"
              }
            }
          },
          {
            "name": "bump",
            "type": "u8"
          },
          {
            "name": "exitCode",
            "docs": [
              "The exit code of the final proof, once one arrived: the container's own (0 or more), or",
              "one of `gpu_market_core::lease::exit`'s when it did not run to its own exit. At the end",
              "with `auto_power`, as their encoded sizes vary."
            ],
            "type": {
              "option": "i32"
            }
          },
          {
            "name": "autoPower",
            "docs": [
              "The bid's auto power tolerance (bps of throughput), copied when it starts: the host may",
              "lower its GPUs' power limits below the stated ones within it. Variable size, so last."
            ],
            "type": {
              "option": "u16"
            }
          }
        ]
      }
    },
    {
      "name": "leaseEnded",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "paid",
            "type": "u64"
          },
          {
            "name": "refund",
            "type": "u64"
          },
          {
            "name": "requeued",
            "docs": [
              "Its bid went back to a book with its remaining escrow: a preempted spot bid, or a queue",
              "bid whose host went silent (failover)."
            ],
            "type": "bool"
          },
          {
            "name": "idle",
            "type": "bool"
          },
          {
            "name": "exitCode",
            "docs": [
              "The final proof's exit code, if one came (`gpu_market_core::lease::exit` says why a",
              "container did not run)."
            ],
            "type": {
              "option": "i32"
            }
          }
        ]
      }
    },
    {
      "name": "leaseExtended",
      "docs": [
        "Its client bought `secs` more run time, paying `paid` into the lease's escrow."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "secs",
            "type": "u32"
          },
          {
            "name": "paid",
            "type": "u64"
          },
          {
            "name": "endsAt",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "leaseIdle",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "intervals",
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "leaseRules",
      "docs": [
        "The market's rules a lease runs under, copied when it starts: the market's authority can",
        "change the market's parameters, never the terms of a running lease."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "billingIntervalSecs",
            "type": "u32"
          },
          {
            "name": "protocolFeeBps",
            "type": "u16"
          },
          {
            "name": "idleUtilisationBps",
            "type": "u16"
          },
          {
            "name": "idleIntervals",
            "type": "u16"
          },
          {
            "name": "idleEndIntervals",
            "type": "u16"
          },
          {
            "name": "silenceIntervals",
            "type": "u16"
          },
          {
            "name": "slashBps",
            "docs": [
              "What a slash for this lease's silence takes: `slash_bps` per `slash_evidence` intervals."
            ],
            "type": "u16"
          },
          {
            "name": "slashEvidence",
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "leaseStarted",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "client",
            "type": "pubkey"
          },
          {
            "name": "kind",
            "type": {
              "defined": {
                "name": "bidKind"
              }
            }
          },
          {
            "name": "gpus",
            "type": "bytes"
          },
          {
            "name": "startedAt",
            "type": "i64"
          },
          {
            "name": "endsAt",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "leaseStopping",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "stopAt",
            "type": "i64"
          },
          {
            "name": "provenUntil",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "machine",
      "docs": [
        "A host's server in one market. Its fixed fields are [`MachineData`]'s (`machine.gpus`",
        "reads through `Deref`); the declaration's variable parts and its status follow."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "data",
            "type": {
              "defined": {
                "name": "machineData"
              }
            }
          },
          {
            "name": "status",
            "type": {
              "defined": {
                "name": "machineStatus"
              }
            }
          },
          {
            "name": "network",
            "type": {
              "defined": {
                "name": "machineNetwork"
              }
            }
          },
          {
            "name": "fault",
            "docs": [
              "The fatal GPU fault its agent reported, which paused the machine; cleared when the owner",
              "resumes it (after servicing the GPU)."
            ],
            "type": {
              "option": {
                "defined": {
                  "name": "machineFault"
                }
              }
            }
          }
        ]
      }
    },
    {
      "name": "machineData",
      "docs": [
        "A machine's fixed fields. Plain old data, keys first (the agent filters machines by",
        "`market` at offset 8), then widest first so that `repr(C)` adds no padding: Borsh reads and",
        "writes it as one copy (`pod_borsh!`), where the derived code took one call per field."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "agent",
            "type": "pubkey"
          },
          {
            "name": "id",
            "docs": [
              "Chosen by the owner, so one owner can register several machines."
            ],
            "type": "u64"
          },
          {
            "name": "priceFloorPerGpuHour",
            "type": "u64"
          },
          {
            "name": "electricityCostPerKwh",
            "type": "u64"
          },
          {
            "name": "registeredAt",
            "type": "i64"
          },
          {
            "name": "lastHeartbeat",
            "type": "i64"
          },
          {
            "name": "evidenceSince",
            "type": "i64"
          },
          {
            "name": "bond",
            "docs": [
              "The stake this machine bonds: the market's `min_host_stake` when it was registered,",
              "never changed after (a later rise of the parameter binds new machines only, so it cannot",
              "trap a host's stake), and what one slash of it takes its share of."
            ],
            "type": "u64"
          },
          {
            "name": "unclaimedPay",
            "docs": [
              "What its leases' proofs accrued and `claim_pay` has not paid yet: the host's pay, and",
              "the protocol's fee on it (both still in the payment vault, counted in the market's",
              "`total_escrow`). Proofs write only the machine and its leases, never an account every",
              "machine shares."
            ],
            "type": "u64"
          },
          {
            "name": "unclaimedFee",
            "type": "u64"
          },
          {
            "name": "spotBook",
            "docs": [
              "The machine's spot book (a `BidBook` account), set by `init_spot_book`."
            ],
            "type": "pubkey"
          },
          {
            "name": "reservation",
            "docs": [
              "The queue bid its GPUs are held for, if any (`reserve`)."
            ],
            "type": {
              "defined": {
                "name": "reservation"
              }
            }
          },
          {
            "name": "walk",
            "docs": [
              "How far its agent's walk of a book got (`walk_book`), for `allocate` to rely on."
            ],
            "type": {
              "defined": {
                "name": "bookWalk"
              }
            }
          },
          {
            "name": "cpuMilli",
            "docs": [
              "Thousandths of a CPU core and MiB of memory the machine gives its leases in all."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "type": "u32"
          },
          {
            "name": "usedCpuMilli",
            "docs": [
              "Of those, what running leases hold."
            ],
            "type": "u32"
          },
          {
            "name": "usedMemoryMib",
            "type": "u32"
          },
          {
            "name": "missedIntervals",
            "docs": [
              "Billing intervals of its leases it never proved (host silence), ever."
            ],
            "type": "u32"
          },
          {
            "name": "violations",
            "docs": [
              "Proofs whose peak power exceeded the agreed limit, ever."
            ],
            "type": "u32"
          },
          {
            "name": "unslashedMissed",
            "docs": [
              "Evidence not yet used by a slash: skipped intervals and power-limit violations since",
              "`evidence_since` (evidence older than the market's window expires)."
            ],
            "type": "u32"
          },
          {
            "name": "unslashedViolations",
            "type": "u32"
          },
          {
            "name": "gpus",
            "type": {
              "defined": {
                "name": "gpuTable"
              }
            }
          },
          {
            "name": "usedGib",
            "docs": [
              "GiB of each GPU held by running leases."
            ],
            "type": {
              "defined": {
                "name": "gibTable"
              }
            }
          },
          {
            "name": "gpuTerms",
            "docs": [
              "The overclock terms each GPU runs while leases hold some of it: a GPU has one power",
              "limit and one set of clocks, so leases share a GPU only when they agree on them."
            ],
            "type": {
              "defined": {
                "name": "termsTable"
              }
            }
          },
          {
            "name": "spotGpus",
            "docs": [
              "Bit `g`: GPU `g` is held by a spot lease (queue bids may preempt it)."
            ],
            "type": "u16"
          },
          {
            "name": "leases",
            "docs": [
              "Leases running on the machine."
            ],
            "type": "u16"
          },
          {
            "name": "region",
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          },
          {
            "name": "gpuCount",
            "type": "u8"
          },
          {
            "name": "cachedImageCount",
            "type": "u8"
          },
          {
            "name": "cachedImages",
            "type": {
              "defined": {
                "name": "imageTable"
              }
            }
          },
          {
            "name": "bump",
            "type": "u8"
          },
          {
            "name": "wholeGpus",
            "docs": [
              "1: no GPU of the machine is shared between leases. Its agent cannot confine a lease to a",
              "GiB slice of a GPU (the host has no NVIDIA MPS) and said so (`set_whole_gpus`): a lease",
              "that asks less than a GPU's memory gets that GPU alone."
            ],
            "type": "u8"
          }
        ]
      }
    },
    {
      "name": "machineFault",
      "docs": [
        "A fatal GPU fault as the machine's agent reported it (`report_fault`)."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "gpu",
            "docs": [
              "The machine's GPU (its index in the machine's GPU list)."
            ],
            "type": "u8"
          },
          {
            "name": "xid",
            "docs": [
              "The driver's Xid error code (NVIDIA's catalogue), or 0 where the driver gave none."
            ],
            "type": "u32"
          },
          {
            "name": "at",
            "docs": [
              "When the report landed (the cluster's clock)."
            ],
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "machineFaulted",
      "docs": [
        "The machine's agent reported a fatal GPU fault: the machine is paused until its owner",
        "resumes it."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "gpu",
            "type": "u8"
          },
          {
            "name": "xid",
            "type": "u32"
          },
          {
            "name": "at",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "machineHeartbeat",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "at",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "machineNetwork",
      "docs": [
        "How clients reach a machine's leases and what those may reach: shown before bidding. The",
        "default publishes nothing and gives leases no network and no scratch volume."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "host",
            "docs": [
              "The machine's public address for published ports and the agent's API: a DNS name or",
              "an IP address; empty when it publishes nothing."
            ],
            "type": "string"
          },
          {
            "name": "apiPort",
            "docs": [
              "The port of the agent's API (TLS under the agent's key; 0: none)."
            ],
            "type": "u16"
          },
          {
            "name": "portsPerLease",
            "docs": [
              "The most container ports one lease may publish."
            ],
            "type": "u8"
          },
          {
            "name": "scratchGib",
            "docs": [
              "The most GiB of scratch volume one lease gets at `/workspace`."
            ],
            "type": "u16"
          },
          {
            "name": "egress",
            "type": {
              "defined": {
                "name": "egress"
              }
            }
          },
          {
            "name": "allow",
            "docs": [
              "With [`Egress::AllowList`]: the networks leases may reach."
            ],
            "type": {
              "vec": {
                "defined": {
                  "name": "cidr"
                }
              }
            }
          }
        ]
      }
    },
    {
      "name": "machineRegistered",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "agent",
            "type": "pubkey"
          },
          {
            "name": "gpuCount",
            "type": "u8"
          }
        ]
      }
    },
    {
      "name": "machineStatus",
      "docs": [
        "Machine status. Stored as a `u8` so the layout is stable; `Retired` is final."
      ],
      "type": {
        "kind": "enum",
        "variants": [
          {
            "name": "active"
          },
          {
            "name": "paused"
          },
          {
            "name": "retired"
          }
        ]
      }
    },
    {
      "name": "machineStatusChanged",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "old",
            "type": {
              "defined": {
                "name": "machineStatus"
              }
            }
          },
          {
            "name": "new",
            "type": {
              "defined": {
                "name": "machineStatus"
              }
            }
          }
        ]
      }
    },
    {
      "name": "machineTerms",
      "docs": [
        "What a host declares about a machine: set at registration, changed by `update_machine`.",
        "Its cached images are not among them: `set_cached_images` declares those, in a transaction",
        "of their own, so that a machine of 16 GPUs with every network term registers in one packet."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "agent",
            "docs": [
              "The hot key of the machine's agent: it signs heartbeats and usage proofs."
            ],
            "type": "pubkey"
          },
          {
            "name": "region",
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          },
          {
            "name": "gpus",
            "type": {
              "vec": {
                "defined": {
                  "name": "gpuSpec"
                }
              }
            }
          },
          {
            "name": "priceFloorPerGpuHour",
            "docs": [
              "The host's floor, per GPU-hour, in payment-token base units."
            ],
            "type": "u64"
          },
          {
            "name": "electricityCostPerKwh",
            "docs": [
              "The host's electricity cost per kWh, in payment-token base units (for spot profit)."
            ],
            "type": "u64"
          },
          {
            "name": "network",
            "type": {
              "defined": {
                "name": "machineNetwork"
              }
            }
          },
          {
            "name": "cpuMilli",
            "docs": [
              "Thousandths of a CPU core the machine gives its leases in all (0: none; only bids that",
              "reserve no CPU fit)."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "docs": [
              "MiB of memory the machine gives its leases in all (0: none, as for CPU)."
            ],
            "type": "u32"
          }
        ]
      }
    },
    {
      "name": "machineUpdated",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "agent",
            "type": "pubkey"
          },
          {
            "name": "gpuCount",
            "type": "u8"
          }
        ]
      }
    },
    {
      "name": "machineWholeGpus",
      "docs": [
        "The machine's agent said whether its GPUs are leased whole only (its host cannot confine a",
        "lease to a GiB slice)."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "whole",
            "type": "bool"
          }
        ]
      }
    },
    {
      "name": "market",
      "docs": [
        "A market: who runs it, which tokens it uses, and the rules of its auction. Its fields are",
        "[`MarketData`]'s (`market.total_escrow` reads through `Deref`)."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "data",
            "type": {
              "defined": {
                "name": "marketData"
              }
            }
          }
        ]
      }
    },
    {
      "name": "marketData",
      "docs": [
        "Everything a market holds. Plain old data, widest fields first so that `repr(C)` adds no",
        "padding: Borsh reads and writes it as one copy (`pod_borsh!`), where the derived code took",
        "one call per field, about 1.1k compute units an instruction that writes the market."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "authority",
            "type": "pubkey"
          },
          {
            "name": "id",
            "docs": [
              "Chosen by the creator so one authority can run several markets."
            ],
            "type": "u64"
          },
          {
            "name": "stakeMint",
            "type": "pubkey"
          },
          {
            "name": "paymentMint",
            "type": "pubkey"
          },
          {
            "name": "stakeVault",
            "type": "pubkey"
          },
          {
            "name": "paymentVault",
            "type": "pubkey"
          },
          {
            "name": "treasury",
            "docs": [
              "Token account of the payment mint that receives the protocol fee."
            ],
            "type": "pubkey"
          },
          {
            "name": "stakeTreasury",
            "docs": [
              "Token account of the stake mint that receives slashed host stake."
            ],
            "type": "pubkey"
          },
          {
            "name": "params",
            "type": {
              "defined": {
                "name": "marketParams"
              }
            }
          },
          {
            "name": "demandBps",
            "docs": [
              "Smoothed demand factor (bps), sampled once per billing interval (`tick_demand`)."
            ],
            "type": "u64"
          },
          {
            "name": "demandInterval",
            "docs": [
              "The billing interval of the last demand sample."
            ],
            "type": "u64"
          },
          {
            "name": "queueBook",
            "docs": [
              "The market's queue book (a `BidBook` account), set by `init_queue_book`."
            ],
            "type": "pubkey"
          },
          {
            "name": "gpusOffered",
            "docs": [
              "GPUs of active machines (the supply side of the demand factor and the cap's base)."
            ],
            "type": "u64"
          },
          {
            "name": "gpusWaiting",
            "docs": [
              "GPUs asked for by waiting queue bids (the demand side)."
            ],
            "type": "u64"
          },
          {
            "name": "capGpusOffered",
            "docs": [
              "`gpus_offered` as it stood when the market's clock last ticked (`tick_demand`): the",
              "anti-monopoly cap's base, so that no instruction can move the cap inside the transaction",
              "that relies on it (a host re-declaring an idle machine's GPUs around its own `allocate`).",
              "`u64::MAX` until the first tick: the market's opening interval has no cap."
            ],
            "type": "u64"
          },
          {
            "name": "nextBidSeq",
            "docs": [
              "The next bid's placement number."
            ],
            "type": "u64"
          },
          {
            "name": "totalEscrow",
            "docs": [
              "Tokens held in the payment vault for what clients paid in: the escrow of waiting bids",
              "and running leases, and the pay (with its fee) their proofs accrued to machines that",
              "was not claimed yet (`Machine::unclaimed_pay`, `unclaimed_fee`)."
            ],
            "type": "u64"
          },
          {
            "name": "totalStaked",
            "docs": [
              "Tokens staked (and not asked back) in this market."
            ],
            "type": "u64"
          },
          {
            "name": "totalPendingUnstake",
            "docs": [
              "Tokens asked back and still in the stake vault, waiting for their cooldown."
            ],
            "type": "u64"
          },
          {
            "name": "createdAt",
            "type": "i64"
          },
          {
            "name": "pendingParams",
            "docs": [
              "Parameters `update_market` scheduled, applied from `pending_at` on (0: none pending)."
            ],
            "type": {
              "defined": {
                "name": "marketParams"
              }
            }
          },
          {
            "name": "pendingAt",
            "type": "i64"
          },
          {
            "name": "feesDue",
            "docs": [
              "Protocol fees held in the payment vault until `collect_fees` moves them to the treasury",
              "(so no payment depends on an account the authority could close or freeze)."
            ],
            "type": "u64"
          },
          {
            "name": "slashedDue",
            "docs": [
              "Slashed host stake held in the stake vault until `collect_fees` moves it."
            ],
            "type": "u64"
          },
          {
            "name": "refundsDue",
            "docs": [
              "Refunds held in the payment vault for clients to claim (the sum of their stake accounts'",
              "`refunds_due`): no longer escrow, not yet paid out."
            ],
            "type": "u64"
          },
          {
            "name": "burnDue",
            "docs": [
              "Payment tokens held in the payment vault to be burnt by `collect_fees`: urgency premiums",
              "and holding charges. Burnt, not paid to anyone, so that no party (the authority",
              "included) gets back what it spends to rank first or to hold a full book."
            ],
            "type": "u64"
          },
          {
            "name": "clockSecs",
            "docs": [
              "The tick of the market's clock: the billing interval it opened with, never changed.",
              "Bid aging and its handicaps, the longest wait and demand sampling count in it, so a",
              "later change of `billing_interval_secs` (which a lease takes at its start) neither",
              "reorders the book nor pauses demand sampling."
            ],
            "type": "u32"
          },
          {
            "name": "bump",
            "type": "u8"
          },
          {
            "name": "stakeVaultBump",
            "type": "u8"
          },
          {
            "name": "paymentVaultBump",
            "type": "u8"
          },
          {
            "name": "reserved",
            "docs": [
              "Brings the size to a multiple of the alignment (8), so that `repr(C)` adds no padding."
            ],
            "type": {
              "array": [
                "u8",
                1
              ]
            }
          },
          {
            "name": "regions",
            "docs": [
              "The regions machines may declare and bids may name, in the order `add_region` listed",
              "them (never removed or reordered: book entries keep their indices); empty labels after."
            ],
            "type": {
              "defined": {
                "name": "regionTable"
              }
            }
          },
          {
            "name": "classNames",
            "docs": [
              "The model name of each GPU class (`name_gpu_class`), by which clients bid for it: set",
              "once, never changed, so a class means one model for the life of the market."
            ],
            "type": {
              "defined": {
                "name": "classNames"
              }
            }
          }
        ]
      }
    },
    {
      "name": "marketInitialized",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "authority",
            "type": "pubkey"
          },
          {
            "name": "stakeMint",
            "type": "pubkey"
          },
          {
            "name": "paymentMint",
            "type": "pubkey"
          }
        ]
      }
    },
    {
      "name": "marketParams",
      "docs": [
        "The rules of a market's auction: set at `init_market`, changed by `update_market`. Plain old",
        "data, widest fields first so that `repr(C)` adds no padding: Borsh reads and writes it as one",
        "copy (the market account holds it twice, in force and scheduled)."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "stakeBound",
            "docs": [
              "The stake at which the stake input S saturates."
            ],
            "type": "u64"
          },
          {
            "name": "spendBound",
            "docs": [
              "The spend per hour (price × GPUs, payment-token base units) at which the complexity",
              "input C saturates."
            ],
            "type": "u64"
          },
          {
            "name": "basePricePerGpuHour",
            "docs": [
              "Base of the dynamic reserve price, per GPU-hour, in payment-token base units."
            ],
            "type": "u64"
          },
          {
            "name": "minHostStake",
            "docs": [
              "Stake a host needs in the market to register a machine."
            ],
            "type": "u64"
          },
          {
            "name": "billingIntervalSecs",
            "type": "u32"
          },
          {
            "name": "unstakeCooldownSecs",
            "type": "u32"
          },
          {
            "name": "protocolFeeBps",
            "type": "u16"
          },
          {
            "name": "weightsBps",
            "docs": [
              "Score weights: stake, urgency, complexity; they add up to 10 000."
            ],
            "type": {
              "array": [
                "u16",
                3
              ]
            }
          },
          {
            "name": "urgencyPremiumBps",
            "docs": [
              "The urgency premium, as a share of the bid's escrow (bps), at which the urgency input U",
              "saturates."
            ],
            "type": "u16"
          },
          {
            "name": "agingPerInterval",
            "docs": [
              "Score a waiting bid gains per billing interval, so no bid starves."
            ],
            "type": "u16"
          },
          {
            "name": "agingCapBps",
            "docs": [
              "The most aging a queue bid can gather (bps): its deadline may leave it no longer to wait."
            ],
            "type": "u16"
          },
          {
            "name": "maxClientShareBps",
            "docs": [
              "Anti-monopoly cap: the most of the market's GPUs one client may hold, in bps."
            ],
            "type": "u16"
          },
          {
            "name": "demandSmoothingBps",
            "docs": [
              "Weight of the newest sample in the smoothed demand (bps)."
            ],
            "type": "u16"
          },
          {
            "name": "demandCapBps",
            "docs": [
              "The most the demand factor may add (bps)."
            ],
            "type": "u16"
          },
          {
            "name": "idleUtilisationBps",
            "docs": [
              "A usage proof below this average utilisation (bps) counts towards the idle flag."
            ],
            "type": "u16"
          },
          {
            "name": "idleIntervals",
            "docs": [
              "Consecutive low-utilisation proofs that flag a lease idle."
            ],
            "type": "u16"
          },
          {
            "name": "silenceIntervals",
            "docs": [
              "Billing intervals without a proof after which the client may reclaim the escrow."
            ],
            "type": "u16"
          },
          {
            "name": "slashEvidence",
            "docs": [
              "Missed intervals, or power-limit violations, that let anyone slash a host once."
            ],
            "type": "u16"
          },
          {
            "name": "slashBps",
            "docs": [
              "Share of the slashed machine's bond (`min_host_stake`) one slash takes (bps): per",
              "`slash_evidence` silent intervals of a lease (never more than twice the lease's value),",
              "or once per window of evidence."
            ],
            "type": "u16"
          },
          {
            "name": "capabilityBps",
            "docs": [
              "Capability factor of each GPU class, added to 1 (bps)."
            ],
            "type": {
              "defined": {
                "name": "classBps"
              }
            }
          },
          {
            "name": "seasonalBps",
            "docs": [
              "Seasonal factor of each UTC hour of the cluster clock (bps; 10 000 = neutral)."
            ],
            "type": {
              "defined": {
                "name": "hourBps"
              }
            }
          },
          {
            "name": "idleEndIntervals",
            "docs": [
              "Consecutive low-utilisation proofs after which the market ends a lease at the end of the",
              "last one, its unused escrow refunded (0: never). More than `idle_intervals`, so the idle",
              "flag (`LeaseIdle`, `gpu-market lease list --idle`) warns its client first."
            ],
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "marketUpdateApplied",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "params",
            "type": {
              "defined": {
                "name": "marketParams"
              }
            }
          }
        ]
      }
    },
    {
      "name": "marketUpdated",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "old",
            "type": {
              "defined": {
                "name": "marketParams"
              }
            }
          },
          {
            "name": "new",
            "type": {
              "defined": {
                "name": "marketParams"
              }
            }
          },
          {
            "name": "effectiveAt",
            "docs": [
              "When `new` applies (after the market's notice period)."
            ],
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "overclockTerms",
      "docs": [
        "Overclock terms a bid asks of each of its GPUs. The power limit is mandatory; a lock of 0",
        "means \"no lock\", an offset of 0 \"no offset\". `repr(C)` because book entries hold it zero-copy."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "powerLimitW",
            "type": "u16"
          },
          {
            "name": "coreLockMhz",
            "type": "u16"
          },
          {
            "name": "memLockMhz",
            "type": "u16"
          },
          {
            "name": "coreOffsetMhz",
            "type": "i16"
          },
          {
            "name": "memOffsetMhz",
            "type": "i16"
          }
        ]
      }
    },
    {
      "name": "payClaimed",
      "docs": [
        "A machine's accrued pay went to its owner (`claim_pay`); its fee stays for the treasury."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "machine",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "fee",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "placeBidArgs",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "kind",
            "type": {
              "defined": {
                "name": "bidKind"
              }
            }
          },
          {
            "name": "imageRef",
            "type": "string"
          },
          {
            "name": "imageDigest",
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "envHash",
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "gpuCount",
            "type": "u8"
          },
          {
            "name": "gibPerGpu",
            "type": "u16"
          },
          {
            "name": "acceptedClasses",
            "type": "u8"
          },
          {
            "name": "overclock",
            "docs": [
              "One entry per GPU, or one entry for every GPU. The power limit is mandatory in each."
            ],
            "type": {
              "vec": {
                "defined": {
                  "name": "overclockTerms"
                }
              }
            }
          },
          {
            "name": "price",
            "type": "u64"
          },
          {
            "name": "maxDurationSecs",
            "type": "u32"
          },
          {
            "name": "minDurationSecs",
            "docs": [
              "The shortest run the client accepts (at most `max_duration_secs`): the bid may start",
              "until `deadline` less this, and runs until its deadline when it starts after `deadline`",
              "less `max_duration_secs`. Equal to `max_duration_secs`: never started late."
            ],
            "type": "u32"
          },
          {
            "name": "deadline",
            "docs": [
              "The latest end of the bid's run."
            ],
            "type": "i64"
          },
          {
            "name": "urgencyPremium",
            "docs": [
              "Paid at placement and never refunded: it buys urgency (U) in the bid's score."
            ],
            "type": "u64"
          },
          {
            "name": "ports",
            "docs": [
              "Container ports to publish on the machine's address (at most 4, distinct, non-zero)."
            ],
            "type": {
              "vec": "u16"
            }
          },
          {
            "name": "scratchGib",
            "docs": [
              "GiB of scratch volume at the container's `/workspace` (0: none)."
            ],
            "type": "u16"
          },
          {
            "name": "cpuMilli",
            "docs": [
              "Thousandths of a CPU core and MiB of memory the machine holds for the lease; the",
              "container gets them as its limits (0: its GPU memory's share of what the machine gives all",
              "its leases, `Host::or_share`)."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "type": "u32"
          },
          {
            "name": "regions",
            "docs": [
              "The regions whose machines may run it (at most 4 labels; none: any)."
            ],
            "type": {
              "vec": {
                "array": [
                  "u8",
                  16
                ]
              }
            }
          },
          {
            "name": "autoPower",
            "docs": [
              "Auto power: the share of throughput (bps, at most `MAX_AUTO_POWER_TOLERANCE_BPS`) the",
              "host may trade for a lower power limit than the stated one; `None`: the limits hold."
            ],
            "type": {
              "option": "u16"
            }
          }
        ]
      }
    },
    {
      "name": "refundDue",
      "docs": [
        "A refund kept in the payment vault for its client, who passed no token account for it (or",
        "had closed it): the client's stake account owes it (`refunds_due`) until `claim_refunds`."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "refundsDue",
            "docs": [
              "Everything the stake account owes its owner now."
            ],
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "refundsClaimed",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "regionAdded",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "region",
            "type": {
              "array": [
                "u8",
                16
              ]
            }
          }
        ]
      }
    },
    {
      "name": "regionTable",
      "docs": [
        "The regions a market lists, in the order `add_region` listed them."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              {
                "array": [
                  "u8",
                  16
                ]
              },
              32
            ]
          }
        ]
      }
    },
    {
      "name": "reservation",
      "docs": [
        "A machine's reservation for one queue bid (`Machine::reservation`); all zero: none."
      ],
      "repr": {
        "kind": "c"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "docs": [
              "The queue bid the GPUs are held for (default: none)."
            ],
            "type": "pubkey"
          },
          {
            "name": "start",
            "docs": [
              "When they are held from: the earliest time the bid fits the machine, from the ends of",
              "its running leases."
            ],
            "type": "i64"
          },
          {
            "name": "cpuMilli",
            "docs": [
              "The CPU (thousandths of a core) and memory (MiB) the bid's lease will hold."
            ],
            "type": "u32"
          },
          {
            "name": "memoryMib",
            "type": "u32"
          },
          {
            "name": "afterCpuMilli",
            "docs": [
              "What the machine's leases that end after `start` hold of them, kept exact as leases start,",
              "extend and end."
            ],
            "type": "u32"
          },
          {
            "name": "afterMemoryMib",
            "type": "u32"
          },
          {
            "name": "gpus",
            "docs": [
              "Bit `g`: the bid runs on GPU `g` from `start`."
            ],
            "type": "u16"
          },
          {
            "name": "round",
            "docs": [
              "The bid's [`crate::state::BidData::reserved_round`] when it was made."
            ],
            "type": "u16"
          },
          {
            "name": "pad",
            "type": {
              "array": [
                "u8",
                4
              ]
            }
          }
        ]
      }
    },
    {
      "name": "reservationCleared",
      "docs": [
        "The machine's reservation for `bid` no longer holds anything, and was cleared."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "machine",
            "type": "pubkey"
          }
        ]
      }
    },
    {
      "name": "sealedEnv",
      "docs": [
        "A bid's environment sealed to one recipient (a machine's agent key): ciphertext only, never",
        "the plaintext (`gpu_market_sdk::envelope`). The bid's client writes one per machine that may",
        "run the bid; the agent that runs the lease reads the one sealed to its key and checks it",
        "against the bid's `env_hash`. Address: `[seeds::SEALED_ENV, bid, recipient]`."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "docs": [
              "The bid's market (first, so a keeper finds a market's copies with one filter)."
            ],
            "type": "pubkey"
          },
          {
            "name": "bid",
            "type": "pubkey"
          },
          {
            "name": "client",
            "docs": [
              "The bid's client: it wrote the account, and it gets the rent back."
            ],
            "type": "pubkey"
          },
          {
            "name": "recipient",
            "docs": [
              "The key that can open `sealed`."
            ],
            "type": "pubkey"
          },
          {
            "name": "bump",
            "type": "u8"
          },
          {
            "name": "sealed",
            "type": "bytes"
          }
        ]
      }
    },
    {
      "name": "spotPreempted",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "by",
            "docs": [
              "The bid that takes the GPUs."
            ],
            "type": "pubkey"
          },
          {
            "name": "stopAt",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "stakeAccount",
      "docs": [
        "One owner's stake in one market."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "docs": [
              "Tokens that count in the owner's bid scores."
            ],
            "type": "u64"
          },
          {
            "name": "pendingUnstake",
            "docs": [
              "Tokens asked back: they no longer count, and can be withdrawn from `unlocks_at` on."
            ],
            "type": "u64"
          },
          {
            "name": "unlocksAt",
            "docs": [
              "Unix time from which `pending_unstake` can be withdrawn (0 when nothing is pending)."
            ],
            "type": "i64"
          },
          {
            "name": "openBids",
            "docs": [
              "Waiting bids whose score was computed from this stake. While any waits, the stake cannot",
              "be asked back: a score cannot be bought with stake that leaves right after."
            ],
            "type": "u32"
          },
          {
            "name": "gpusHeld",
            "docs": [
              "GPUs the owner holds in running leases (for the anti-monopoly cap)."
            ],
            "type": "u32"
          },
          {
            "name": "machines",
            "docs": [
              "Machines the owner has registered in the market."
            ],
            "type": "u32"
          },
          {
            "name": "bonded",
            "docs": [
              "The counting stake those machines bond: each its `Machine::bond` (the market's",
              "`min_host_stake` when it was registered) until it is closed (which its leases must all",
              "have settled for): a host cannot take back the stake its leases could be slashed from."
            ],
            "type": "u64"
          },
          {
            "name": "refundsDue",
            "docs": [
              "Escrow refunded to the owner but held in the market's payment vault, because no token",
              "account of the owner was given when the refund was made (it may have closed it): the",
              "owner takes it with `claim_refunds`. Payment-token base units."
            ],
            "type": "u64"
          },
          {
            "name": "lastActive",
            "docs": [
              "The last time the owner signed an instruction with this stake account (opened or added",
              "stake, asked it back, withdrew, placed or cancelled a bid, ended a lease, claimed",
              "refunds): `gpu-market market inactive` shows owners quiet for long."
            ],
            "type": "i64"
          },
          {
            "name": "bump",
            "type": "u8"
          }
        ]
      }
    },
    {
      "name": "stakeWithdrawn",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "staked",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "total",
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "termsTable",
      "docs": [
        "The overclock terms each of a machine's GPUs runs."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              {
                "defined": {
                  "name": "overclockTerms"
                }
              },
              16
            ]
          }
        ]
      }
    },
    {
      "name": "unstakeRequested",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "market",
            "type": "pubkey"
          },
          {
            "name": "owner",
            "type": "pubkey"
          },
          {
            "name": "amount",
            "type": "u64"
          },
          {
            "name": "unlocksAt",
            "type": "i64"
          }
        ]
      }
    },
    {
      "name": "usageProofArgs",
      "docs": [
        "One lease's proof of `intervals` billing intervals from `interval` on, as `submit_usage`",
        "takes it."
      ],
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "interval",
            "type": "u32"
          },
          {
            "name": "intervals",
            "docs": [
              "At least 1 (`gpu_market_core::lease::span_window`)."
            ],
            "type": "u16"
          },
          {
            "name": "gpuSeconds",
            "type": "u64"
          },
          {
            "name": "energyJ",
            "type": "u64"
          },
          {
            "name": "energySavedJ",
            "docs": [
              "Energy the host's automatic power limit saved in the interval, in J (0 unless the bid",
              "opted in to auto power)."
            ],
            "type": "u64"
          },
          {
            "name": "avgUtilisationBps",
            "type": "u16"
          },
          {
            "name": "peakPowerW",
            "docs": [
              "Peak power of each of the lease's GPUs, in W, in the bid's GPU order."
            ],
            "type": {
              "vec": "u16"
            }
          },
          {
            "name": "exitCode",
            "type": {
              "option": "i32"
            }
          },
          {
            "name": "samplesHash",
            "docs": [
              "sha256 of the power readings behind `peak_power_w`",
              "(`gpu_market_core::evidence::PowerLog`), chained into the proof's hash."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          }
        ]
      }
    },
    {
      "name": "usageProven",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "lease",
            "type": "pubkey"
          },
          {
            "name": "interval",
            "type": "u32"
          },
          {
            "name": "intervals",
            "docs": [
              "How many intervals from `interval` on the proof covered."
            ],
            "type": "u16"
          },
          {
            "name": "paidToHost",
            "type": "u64"
          },
          {
            "name": "fee",
            "type": "u64"
          },
          {
            "name": "escrowLeft",
            "type": "u64"
          },
          {
            "name": "powerViolation",
            "type": "bool"
          },
          {
            "name": "proofHash",
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "exitCode",
            "docs": [
              "The container's exit code in a final proof (`gpu_market_core::lease::exit`)."
            ],
            "type": {
              "option": "i32"
            }
          },
          {
            "name": "peakPowerW",
            "docs": [
              "What the proof states of each GPU's sustained peak, and the lease's limits, in W."
            ],
            "type": {
              "vec": "u16"
            }
          },
          {
            "name": "powerLimitsW",
            "type": {
              "vec": "u16"
            }
          },
          {
            "name": "samplesHash",
            "docs": [
              "The hash of the power readings the proof committed to (`gpu-market lease audit`)."
            ],
            "type": {
              "array": [
                "u8",
                32
              ]
            }
          },
          {
            "name": "energySavedJ",
            "docs": [
              "Energy the automatic power limit saved in the interval, in J (0 without auto power)."
            ],
            "type": "u64"
          }
        ]
      }
    },
    {
      "name": "walkBookArgs",
      "type": {
        "kind": "struct",
        "fields": [
          {
            "name": "entries",
            "docs": [
              "The most entries this transaction judges (its sender sizes it to the transaction's",
              "compute units: an entry takes from about 90 to several hundred)."
            ],
            "type": "u16"
          }
        ]
      }
    },
    {
      "name": "wattTable",
      "docs": [
        "Watts for each of a lease's GPUs."
      ],
      "repr": {
        "kind": "transparent"
      },
      "type": {
        "kind": "struct",
        "fields": [
          {
            "array": [
              "u16",
              16
            ]
          }
        ]
      }
    }
  ],
  "constants": [
    {
      "name": "bid",
      "type": "bytes",
      "value": "[98, 105, 100]"
    },
    {
      "name": "bookCapacity",
      "docs": [
        "Entries a book holds at most."
      ],
      "type": "u32",
      "value": "4096"
    },
    {
      "name": "bookEmptySpace",
      "docs": [
        "Bytes of an empty book account: what `init_queue_book` and `init_spot_book` expect."
      ],
      "type": "u32",
      "value": "136"
    },
    {
      "name": "bookHeaderSize",
      "docs": [
        "Bytes of a book's header after its 8-byte discriminator."
      ],
      "type": "u32",
      "value": "128"
    },
    {
      "name": "bookKindQueue",
      "docs": [
        "`BidBook::kind` of a market's queue book (bids waiting for any machine)."
      ],
      "type": "u8",
      "value": "1"
    },
    {
      "name": "bookKindSpot",
      "docs": [
        "`BidBook::kind` of one machine's spot book."
      ],
      "type": "u8",
      "value": "2"
    },
    {
      "name": "bookNil",
      "docs": [
        "The empty handle: no root, no next free node."
      ],
      "type": "u32",
      "value": "4294967295"
    },
    {
      "name": "bookSlotSize",
      "docs": [
        "Bytes each waiting bid adds to its book (paid by the bid, returned when it leaves)."
      ],
      "type": "u32",
      "value": "160"
    },
    {
      "name": "classNameLen",
      "docs": [
        "Bytes of a GPU class's name (zero-padded)."
      ],
      "type": "u32",
      "value": "16"
    },
    {
      "name": "gpuClasses",
      "docs": [
        "GPU classes a market prices."
      ],
      "type": "u32",
      "value": "8"
    },
    {
      "name": "hostLen",
      "docs": [
        "Bytes of a machine's public address at most."
      ],
      "type": "u32",
      "value": "64"
    },
    {
      "name": "imageRefLen",
      "docs": [
        "Bytes of a bid's image reference at most."
      ],
      "type": "u32",
      "value": "255"
    },
    {
      "name": "lease",
      "type": "bytes",
      "value": "[108, 101, 97, 115, 101]"
    },
    {
      "name": "machine",
      "type": "bytes",
      "value": "[109, 97, 99, 104, 105, 110, 101]"
    },
    {
      "name": "market",
      "type": "bytes",
      "value": "[109, 97, 114, 107, 101, 116]"
    },
    {
      "name": "maxAllow",
      "docs": [
        "Networks a machine's egress allow-list names at most."
      ],
      "type": "u32",
      "value": "4"
    },
    {
      "name": "maxAutoPowerToleranceBps",
      "docs": [
        "The most throughput, in bps, a bid may let the host trade for energy with auto power (20 %)."
      ],
      "type": "u16",
      "value": "2000"
    },
    {
      "name": "maxBidWaitSecs",
      "docs": [
        "The longest any bid may wait to start: 7 days."
      ],
      "type": "u64",
      "value": "604800"
    },
    {
      "name": "maxBillingIntervalSecs",
      "docs": [
        "Bounds on what a market's authority may set: the parameters can be changed, never bent."
      ],
      "type": "u32",
      "value": "3600"
    },
    {
      "name": "maxCachedImages",
      "docs": [
        "Cached images a machine declares at most (`set_cached_images`)."
      ],
      "type": "u32",
      "value": "8"
    },
    {
      "name": "maxGangParts",
      "docs": [
        "Most machines one gang bid runs on at once: what `allocate_gang` fits in one transaction with",
        "a machine and a lease account for each part."
      ],
      "type": "u8",
      "value": "8"
    },
    {
      "name": "maxGpus",
      "docs": [
        "GPUs a machine declares at most."
      ],
      "type": "u32",
      "value": "16"
    },
    {
      "name": "maxMarketRegions",
      "docs": [
        "Regions a market lists at most."
      ],
      "type": "u32",
      "value": "32"
    },
    {
      "name": "maxPorts",
      "docs": [
        "Ports a bid publishes at most."
      ],
      "type": "u32",
      "value": "4"
    },
    {
      "name": "maxProtocolFeeBps",
      "type": "u16",
      "value": "1000"
    },
    {
      "name": "maxRegions",
      "docs": [
        "Regions a bid names at most."
      ],
      "type": "u32",
      "value": "4"
    },
    {
      "name": "maxSlashBps",
      "type": "u16",
      "value": "5000"
    },
    {
      "name": "maxUnstakeCooldownSecs",
      "type": "u32",
      "value": "2592000"
    },
    {
      "name": "minSilenceIntervals",
      "docs": [
        "A host always has one whole interval after a window ends to prove it before a client may",
        "call it silent."
      ],
      "type": "u16",
      "value": "2"
    },
    {
      "name": "paymentVault",
      "type": "bytes",
      "value": "[112, 97, 121, 109, 101, 110, 116, 95, 118, 97, 117, 108, 116]"
    },
    {
      "name": "regionLen",
      "docs": [
        "Bytes of a region label (zero-padded)."
      ],
      "type": "u32",
      "value": "16"
    },
    {
      "name": "sealedEnv",
      "type": "bytes",
      "value": "[115, 101, 97, 108, 101, 100, 95, 101, 110, 118]"
    },
    {
      "name": "stake",
      "type": "bytes",
      "value": "[115, 116, 97, 107, 101]"
    },
    {
      "name": "stakeVault",
      "type": "bytes",
      "value": "[115, 116, 97, 107, 101, 95, 118, 97, 117, 108, 116]"
    }
  ]
};
