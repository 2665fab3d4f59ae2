//! The spans of a traced batch, made from its journal once it has run: a
//! `tensorplug.batch` span in each traced request's trace, and the plugin calls (with
//! their log lines and `wasi:nn` computes) under the leader's (see the module's doc).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::{Link, Span, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::journal::{CallEnd, CallRecord, Journal};
use super::request::{clipped, millis, ItemsTrace};
use super::Clock;

/// Most links a leader's batch span holds to the other requests' (the SDK keeps 128).
const MAX_LINKS: usize = 32;

/// A batch as the instance that ran it saw it.
pub struct BatchRun<'a> {
    /// Each item's trace, in the batch's order (None: its request is not traced).
    pub items: &'a [Option<Arc<ItemsTrace>>],
    pub started: Instant,
    pub ended: Instant,
    /// Whether its items were handed back by an earlier batch (bisection's re-runs).
    pub rerun: bool,
}

/// Numbers batches, so that the requests of one batch can be told in their traces.
static BATCHES: AtomicU64 = AtomicU64::new(1);

/// Makes the spans of a batch that ran with `journal` recording its calls.
pub fn record_batch(run: BatchRun<'_>, journal: Journal) {
    let Some(tracer) = super::tracer() else { return };
    let mut requests: Vec<(&Arc<ItemsTrace>, usize)> = Vec::new();
    for trace in run.items.iter().flatten() {
        match requests.iter_mut().find(|(seen, _)| Arc::ptr_eq(seen, trace)) {
            Some((_, items)) => *items += 1,
            None => requests.push((trace, 1)),
        }
    }
    let Some(((leader, _), others)) = requests.split_first() else {
        return;
    };
    let clock = Clock::now();
    let id = BATCHES.fetch_add(1, Ordering::Relaxed) as i64;
    let shared = [
        KeyValue::new("tensorplug.batch.id", id),
        KeyValue::new("tensorplug.batch.size", run.items.len() as i64),
        KeyValue::new("tensorplug.batch.requests", requests.len() as i64),
        KeyValue::new("tensorplug.batch.rerun", run.rerun),
    ];
    let batch_span = |trace: &ItemsTrace, items: usize, links: Vec<Link>| {
        let queued = run.started.saturating_duration_since(trace.queued_at);
        let mut attributes: Vec<KeyValue> = shared.to_vec();
        attributes.extend(trace.model.iter().cloned());
        attributes.push(KeyValue::new("tensorplug.batch.items", items as i64));
        attributes.push(KeyValue::new("tensorplug.queue.wait_ms", millis(queued)));
        if journal.calls_left_out > 0 {
            attributes.push(KeyValue::new(
                "tensorplug.batch.calls_left_out",
                journal.calls_left_out as i64,
            ));
        }
        let mut span = tracer.build_with_context(
            SpanBuilder::from_name("tensorplug.batch")
                .with_start_time(clock.at(trace.queued_at.min(run.started)))
                .with_attributes(attributes)
                .with_links(links),
            &trace.parent,
        );
        span.add_event_with_timestamp("tensorplug.batch.started", clock.at(run.started), Vec::new());
        span
    };
    let leader_items = requests[0].1;
    let mut leader_span = batch_span(leader, leader_items, links_to(others.iter().map(|(t, _)| *t)));
    let leader_context = leader_span.span_context().clone();
    let leader_cx = leader.parent.with_remote_span_context(leader_context.clone());
    for call in &journal.calls {
        record_call(tracer, &leader_cx, call);
    }
    leader_span.end_with_timestamp(clock.at(run.ended));
    for (trace, items) in others {
        let mut span = batch_span(trace, *items, vec![Link::with_context(leader_context.clone())]);
        span.end_with_timestamp(clock.at(run.ended));
    }
}

/// `tensorplug.<stage>`, without a format per call.
fn span_name(stage: &'static str) -> Cow<'static, str> {
    match stage {
        "preprocess" => "tensorplug.preprocess".into(),
        "predict" => "tensorplug.predict".into(),
        "postprocess" => "tensorplug.postprocess".into(),
        other => format!("tensorplug.{other}").into(),
    }
}

/// Links to the batch spans' parents (the other requests' server spans), bounded.
fn links_to<'a>(traces: impl Iterator<Item = &'a Arc<ItemsTrace>>) -> Vec<Link> {
    traces
        .take(MAX_LINKS)
        .map(|trace| Link::with_context(trace.parent.span().span_context().clone()))
        .collect()
}

/// One plugin call's span, with its log lines as events and its computes as children.
fn record_call(tracer: &SdkTracer, parent: &Context, call: &CallRecord) {
    let mut attributes = vec![
        KeyValue::new("tensorplug.stage", call.stage),
        KeyValue::new("tensorplug.call.items", call.items as i64),
        KeyValue::new("tensorplug.call.failed", call.failed as i64),
        KeyValue::new("tensorplug.instance.replaced", call.replaced),
    ];
    if call.logs_left_out > 0 {
        attributes.push(KeyValue::new("tensorplug.log.left_out", call.logs_left_out as i64));
    }
    let mut span = tracer.build_with_context(
        SpanBuilder::from_name(span_name(call.stage))
            .with_kind(SpanKind::Internal)
            .with_start_time(call.started)
            .with_attributes(attributes),
        parent,
    );
    for line in &call.logs {
        span.add_event_with_timestamp(
            "log",
            line.at,
            vec![
                KeyValue::new("log.level", line.level),
                KeyValue::new("log.message", clipped(&line.message)),
            ],
        );
    }
    if let CallEnd::Trapped { message, deadline } = &call.end {
        span.set_attribute(KeyValue::new("tensorplug.call.trapped", true));
        span.set_attribute(KeyValue::new("tensorplug.call.deadline", *deadline));
        span.set_status(Status::error(clipped(message)));
    }
    let call_cx = parent.with_remote_span_context(span.span_context().clone());
    for compute in &call.computes {
        let mut child = tracer.build_with_context(
            SpanBuilder::from_name("tensorplug.nn.compute").with_start_time(compute.started),
            &call_cx,
        );
        if let Some(error) = &compute.error {
            child.set_status(Status::error(clipped(error)));
        }
        child.end_with_timestamp(compute.started + compute.took);
    }
    span.end_with_timestamp(call.started + call.took);
}
