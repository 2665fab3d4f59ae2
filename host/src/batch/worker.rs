//! A worker: takes a group of lines from the grouper, sends them as one request (in
//! process: each as its own request, at once), and turns the answer into one answer
//! line per line, retrying what may succeed later.
//!
//! How a group is resolved, round by round:
//!
//! - a failure of the whole request that a retry may cure (connection error, 503, 504) is
//!   retried for every line with retries left, after the backoff; the others fail with it;
//! - any other failure of a merged request (two lines or more) sends each line alone, so
//!   that a line's answer never depends on its neighbours (a request too large merged, a
//!   server that refuses multi-item requests);
//! - an answer that cannot be split back (outputs that are not per item) sends each line
//!   alone too;
//! - otherwise each line takes its share: lines whose items failed only with 503/504 are
//!   retried (if they have retries left), the rest are done;
//! - over gRPC, a partly failed request says which items failed but not what the others
//!   answered: the lines whose items all succeeded are sent again together, and, should
//!   that happen again, each alone.
//!
//! Each line counts its attempts (every request that carried it) and reports the number in
//! its answer line. Once a stop is requested, nothing is retried any more: a line that
//! would have been is answered with its last failure.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;

use super::group::LineGrouper;
use super::line::{AnswerLine, Line, LineOutcome, Resolved};
use super::merge;
use super::output;
use super::progress::Counters;
use super::random::new_inference_id;
use super::retry::RetryPolicy;
use super::stop::Stop;
use super::transport::local::Local;
use super::transport::reply_status;
use super::transport::{Failure, Reply, Transport};
use crate::traces::JobTrace;

/// One of the `--workers` request loops.
pub(crate) struct Worker {
    pub transport: Arc<Transport>,
    pub policy: RetryPolicy,
    pub stop: Arc<Stop>,
    pub counters: Arc<Counters>,
    pub answers: mpsc::Sender<AnswerLine>,
    /// The run's trace: each request sent is a client span of it.
    pub trace: Arc<JobTrace>,
}

/// A line on its way through a worker.
struct Pending {
    line: Line,
    /// Requests sent with this line so far.
    attempts: u32,
    /// Retried at least once.
    retried: bool,
    /// Sent again for its outputs (gRPC) already.
    resent: bool,
}

impl Pending {
    fn new(line: Line) -> Self {
        Pending {
            line,
            attempts: 0,
            retried: false,
            resent: false,
        }
    }

    fn resolved(self, outcome: LineOutcome, inference_id: String) -> Resolved {
        Resolved {
            line: self.line,
            outcome,
            attempts: self.attempts,
            retried: self.retried,
            inference_id,
        }
    }
}

impl Worker {
    /// Takes groups until the input is used up (or a stop), answering every line taken.
    pub(crate) async fn run(self, grouper: Arc<tokio::sync::Mutex<LineGrouper>>) {
        loop {
            let group = grouper.lock().await.next_group().await;
            let Some(group) = group else {
                return;
            };
            let pending: Vec<Pending> = group.into_iter().map(Pending::new).collect();
            let resolved = match self.transport.in_process() {
                Some(local) => self.resolve_each(local, pending).await,
                None => self.resolve(pending, None, None).await,
            };
            for resolved in resolved {
                if resolved.retried {
                    self.counters.line_retried();
                }
                let answer = output::answer_line(self.transport.info(), resolved);
                if self.answers.send(answer).await.is_err() {
                    // The writer has stopped (an output error): nothing left to do.
                    return;
                }
            }
        }
    }

    /// In-process: every line of `group` as its own request, handed over together, so
    /// that the serving batcher stacks their items in one go (merged, they would be split
    /// into items there and stacked again, and the answer split back). They carry the
    /// group's one id, as the merged request would have. Each line is then resolved from
    /// its own answer, retried alone if it has to be.
    async fn resolve_each(&self, local: &Local, group: Vec<Pending>) -> Vec<Resolved> {
        if group.len() == 1 {
            return self.resolve(group, None, None).await;
        }
        let inference_id = new_inference_id();
        let requests = group
            .iter()
            .map(|pending| {
                let mut request = pending.line.request.clone();
                request.id = Some(inference_id.clone());
                request
            })
            .collect();
        let trace = self.trace.request(group.len());
        let replies = local.infer_many(requests, &trace).await;
        trace.finish(replies.iter().map(reply_status).max().unwrap_or(0));
        let each = group
            .into_iter()
            .zip(replies)
            .map(|(pending, reply)| self.resolve(vec![pending], Some(inference_id.clone()), Some(reply)));
        join_all(each.collect()).await.into_iter().flatten().collect()
    }

    /// Sends `group` (merged) and resolves every line of it, in rounds. The first
    /// request's id is `first_id` when given; its answer is `first_reply` when the
    /// request has been sent already.
    async fn resolve(
        &self,
        group: Vec<Pending>,
        mut first_id: Option<String>,
        mut first_reply: Option<Result<Reply, Failure>>,
    ) -> Vec<Resolved> {
        let mut done = Vec::with_capacity(group.len());
        let mut rounds: Vec<Vec<Pending>> = vec![group];
        while let Some(mut batch) = rounds.pop() {
            let inference_id = first_id.take().unwrap_or_else(|| match (batch.len(), batch.first()) {
                (1, Some(only)) => only.line.request.id.clone().unwrap_or_else(new_inference_id),
                _ => new_inference_id(),
            });
            for pending in &mut batch {
                pending.attempts += 1;
            }
            let counts: Vec<u64> = batch.iter().map(|p| p.line.items.max(1)).collect();
            let reply = match first_reply.take() {
                Some(reply) => reply,
                None => {
                    let requests: Vec<_> = batch.iter().map(|p| &p.line.request).collect();
                    let trace = self.trace.request(batch.len());
                    self.transport
                        .infer(merge::merge(&requests, &inference_id), trace)
                        .await
                }
            };
            let finish = |pending: Pending, outcome: LineOutcome| pending.resolved(outcome, inference_id.clone());
            let shares = match reply {
                Err(failure) if failure.retryable => {
                    let (again, spent): (Vec<Pending>, Vec<Pending>) =
                        batch.into_iter().partition(|p| self.may_retry(p));
                    done.extend(spent.into_iter().map(|p| finish(p, failed(&failure))));
                    if again.is_empty() {
                        continue;
                    }
                    if self
                        .pause(&again, failure.retry_after, failure.status, &failure.message)
                        .await
                    {
                        rounds.push(retried(again));
                    } else {
                        let interrupted = Failure {
                            message: format!("{} (not retried: interrupted)", failure.message),
                            ..failure
                        };
                        done.extend(again.into_iter().map(|p| finish(p, failed(&interrupted))));
                    }
                    continue;
                }
                Err(failure) if batch.len() > 1 => {
                    tracing::debug!(
                        lines = batch.len(),
                        status = failure.status,
                        "a merged request failed as a whole ({}); its lines go alone",
                        failure.message
                    );
                    rounds.extend(batch.into_iter().map(|p| vec![p]));
                    continue;
                }
                Err(failure) => {
                    done.extend(batch.into_iter().map(|p| finish(p, failed(&failure))));
                    continue;
                }
                Ok(reply) => match merge::split(reply, &counts) {
                    Some(shares) => shares,
                    None if batch.len() > 1 => {
                        tracing::debug!(
                            lines = batch.len(),
                            "the answer cannot be split back; the lines go alone"
                        );
                        rounds.extend(batch.into_iter().map(|p| vec![p]));
                        continue;
                    }
                    None => {
                        let failure = Failure::no_answer("the answer does not match the request".into(), false);
                        done.extend(batch.into_iter().map(|p| finish(p, failed(&failure))));
                        continue;
                    }
                },
            };
            let alone = batch.len() == 1;
            let (mut retry, mut resend) = (Vec::new(), Vec::new());
            for (mut pending, share) in batch.into_iter().zip(shares) {
                match share {
                    None if alone => {
                        let failure = Failure::no_answer("the server reported success without outputs".into(), false);
                        done.push(finish(pending, failed(&failure)));
                    }
                    // Sent again once already, and still no outputs: alone this time.
                    None if pending.resent => rounds.push(vec![pending]),
                    None => {
                        pending.resent = true;
                        resend.push(pending);
                    }
                    Some(outcome) if outcome.retryable() && self.may_retry(&pending) => {
                        retry.push((pending, outcome));
                    }
                    Some(outcome) => done.push(finish(pending, outcome)),
                }
            }
            if !resend.is_empty() {
                rounds.push(resend);
            }
            if retry.is_empty() {
                continue;
            }
            let (lines, outcomes): (Vec<Pending>, Vec<LineOutcome>) = retry.into_iter().unzip();
            let (status, message) = match &outcomes[0] {
                LineOutcome::Failure { status, message } => (*status, message.clone()),
                _ => (503, String::from("items unavailable or timed out")),
            };
            if self.pause(&lines, None, status, &message).await {
                rounds.push(retried(lines));
            } else {
                // Interrupted: each keeps the answer it got.
                done.extend(lines.into_iter().zip(outcomes).map(|(p, o)| finish(p, o)));
            }
        }
        done
    }

    /// Whether `pending` may be sent again.
    fn may_retry(&self, pending: &Pending) -> bool {
        self.policy.may_retry(pending.attempts) && !self.stop.requested()
    }

    /// Waits out the backoff before retrying `lines` (the server's `retry_after` when it
    /// gave one); `false` if a stop came first.
    async fn pause(&self, lines: &[Pending], retry_after: Option<Duration>, status: u16, message: &str) -> bool {
        let attempts = lines.iter().map(|p| p.attempts).max().unwrap_or(1);
        let delay = self.policy.delay(attempts, retry_after);
        tracing::info!(
            lines = lines.len(),
            attempts,
            status,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "retrying: {message}"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            () = self.stop.wait() => false,
        }
    }
}

/// Runs `futures` at once on this task (each wake polls the ones not done yet: a
/// group's few), their outputs in the order they finish.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut running: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs = Vec::with_capacity(running.len());
    std::future::poll_fn(|cx| {
        let mut at = 0;
        while at < running.len() {
            if let Poll::Ready(output) = running[at].as_mut().poll(cx) {
                outputs.push(output);
                drop(running.swap_remove(at));
            } else {
                at += 1;
            }
        }
        if running.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs
}

/// `lines`, marked as retried.
fn retried(mut lines: Vec<Pending>) -> Vec<Pending> {
    for pending in &mut lines {
        pending.retried = true;
    }
    lines
}

/// A line's answer for a failed request.
fn failed(failure: &Failure) -> LineOutcome {
    LineOutcome::Failure {
        status: failure.status,
        message: failure.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn join_all_runs_every_future_at_once_and_gives_them_in_finishing_order() {
        let started = tokio::time::Instant::now();
        let nap = |ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ms
        };
        let outputs = join_all(vec![nap(30), nap(10), nap(20)]).await;
        assert_eq!(outputs, vec![10, 20, 30]);
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(30),
            "at once, not one after another"
        );
    }
}
