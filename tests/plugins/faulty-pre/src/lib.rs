//! A preprocessor that misbehaves on request, for fault-injection tests of the host's
//! item-wise stages (tests/models/faulty-pipeline).
//!
//! Items are `x: FP32 [1]` and pass through unchanged, except:
//!
//! | x | fault |
//! | --- | --- |
//! | -1 | panic "faulty-pre: panic requested" (trap) |
//! | -9 | the answer leaves out the last item (a contract violation) |
//! | -10 | item error 400 "faulty-pre: item refused" |

use tensorplug_guest::prelude::*;

struct FaultyPre;

impl Preprocessor for FaultyPre {
    fn init(_: Parameters) -> Result<Self, String> {
        Ok(FaultyPre)
    }

    fn preprocess(&mut self, items: Vec<Item>) -> Vec<Result<Item, ItemError>> {
        let mut short = false;
        let mut results: Vec<Result<Item, ItemError>> = items
            .into_iter()
            .map(|item| {
                let x = item.input("x")?.to_f32()?.first().copied().unwrap_or_default();
                match x {
                    -1.0 => panic!("faulty-pre: panic requested"),
                    -9.0 => short = true,
                    -10.0 => return Err(ItemError::bad_request("faulty-pre: item refused")),
                    _ => {}
                }
                Ok(item)
            })
            .collect();
        if short {
            results.pop();
        }
        results
    }
}

export_preprocessor!(FaultyPre);
