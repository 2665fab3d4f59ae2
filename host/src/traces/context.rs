//! The W3C Trace Context a request comes with (`traceparent`, `tracestate`: HTTP headers,
//! gRPC metadata, NATS message headers), read within the bounds the specification allows
//! and never an error: a context that cannot be read is ignored, and the request starts a
//! trace of its own.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// Longest `traceparent` read. Version 00 is 55 characters; a later version may append
/// fields (only the first four are read), but nothing needs more than this.
const MAX_TRACEPARENT: usize = 256;
/// What is kept of `tracestate`: the specification asks to pass on at least 512
/// characters, dropping list-members longer than 128 first, then members from the end,
/// and at most 32 members.
const MAX_TRACESTATE: usize = 512;
const MAX_TRACESTATE_MEMBER: usize = 128;
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The trace context a request came with; none (a new trace) when it had none, or none
/// that could be read.
#[derive(Clone, Debug, Default)]
pub struct Incoming {
    pub(super) parent: Context,
}

impl Incoming {
    /// From the values of the `traceparent` and `tracestate` headers (either may appear
    /// several times; values are bytes, as a carrier may hold anything).
    pub fn from_headers<'a>(
        traceparent: impl IntoIterator<Item = &'a [u8]>,
        tracestate: impl IntoIterator<Item = &'a [u8]>,
    ) -> Incoming {
        if !super::enabled() {
            return Incoming::default();
        }
        // Two `traceparent` headers make the context invalid (the specification).
        let mut parents = traceparent.into_iter();
        let (Some(parent), None) = (parents.next(), parents.next()) else {
            return Incoming::default();
        };
        let Some(parent) = (parent.len() <= MAX_TRACEPARENT)
            .then(|| std::str::from_utf8(parent).ok())
            .flatten()
        else {
            return Incoming::default();
        };
        let state = bounded_tracestate(tracestate);
        let carrier = Headers {
            traceparent: parent.trim_matches([' ', '\t']),
            tracestate: state.as_deref(),
        };
        Incoming {
            parent: TraceContextPropagator::new().extract(&carrier),
        }
    }

    /// Whether a valid parent was read (the request continues its client's trace).
    pub fn has_parent(&self) -> bool {
        use opentelemetry::trace::TraceContextExt;
        self.parent.span().span_context().is_valid()
    }
}

/// The list-members of every `tracestate` value, joined, within the specification's
/// bounds: members over 128 characters dropped, then whatever passes 32 members or 512
/// characters. A value that is not UTF-8 ends the list there. Reads no further than it keeps.
fn bounded_tracestate<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    let mut kept = String::new();
    let mut members = 0;
    'values: for value in values {
        let Ok(value) = std::str::from_utf8(value) else { break };
        for member in value.split(',').map(|m| m.trim_matches([' ', '\t'])) {
            if member.is_empty() || member.len() > MAX_TRACESTATE_MEMBER {
                continue;
            }
            let joined = kept.len() + usize::from(!kept.is_empty()) + member.len();
            if members == MAX_TRACESTATE_MEMBERS || joined > MAX_TRACESTATE {
                break 'values;
            }
            if !kept.is_empty() {
                kept.push(',');
            }
            kept.push_str(member);
            members += 1;
        }
    }
    (!kept.is_empty()).then_some(kept)
}

/// The two headers, as the propagator reads them.
struct Headers<'a> {
    traceparent: &'a str,
    tracestate: Option<&'a str>,
}

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.traceparent),
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt;

    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn read(parents: &[&[u8]], states: &[&[u8]]) -> Context {
        super::super::tests::with_tracing_on();
        Incoming::from_headers(parents.iter().copied(), states.iter().copied()).parent
    }

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        let cx = read(&[PARENT.as_bytes()], &[b"vendor=abc,other=1"]);
        let span = cx.span();
        let parent = span.span_context();
        assert_eq!(parent.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
        assert!(parent.is_sampled() && parent.is_remote());
        assert_eq!(parent.trace_state().header(), "vendor=abc,other=1");
    }

    #[test]
    fn hostile_traceparents_are_ignored() {
        let long = format!("{PARENT}-{}", "a".repeat(100_000));
        let cases: Vec<Vec<&[u8]>> = vec![
            vec![b"garbage"],
            vec![b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"],
            vec![b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"],
            vec![b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
            vec![b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"],
            vec![b"00-4bf92f3577b34da6a3ce929d0e0e47\xff6-00f067aa0ba902b7-01"],
            vec![long.as_bytes()],
            vec![PARENT.as_bytes(), PARENT.as_bytes()],
            vec![],
        ];
        for parents in cases {
            let cx = read(&parents, &[b"a=b"]);
            assert!(
                !cx.span().span_context().is_valid(),
                "{:?} was read",
                parents
                    .first()
                    .map(|p| String::from_utf8_lossy(&p[..p.len().min(80)]).into_owned())
            );
        }
    }

    #[test]
    fn a_tracestate_is_kept_within_the_specifications_bounds() {
        let huge = "k=".to_string() + &"v".repeat(100 * 1024);
        let many: String = (0..5000).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        let long_member = format!("long={}", "x".repeat(200));
        for states in [
            vec![huge.as_bytes()],
            vec![many.as_bytes()],
            vec![long_member.as_bytes(), b"short=1"],
            vec![b"a=1\xff", b"b=2"],
        ] {
            let cx = read(&[PARENT.as_bytes()], &states);
            let span = cx.span();
            let context = span.span_context();
            assert!(context.is_valid(), "the parent is read whatever tracestate holds");
            let header = context.trace_state().header();
            assert!(header.len() <= MAX_TRACESTATE, "{} characters kept", header.len());
            assert!(header.split(',').count() <= MAX_TRACESTATE_MEMBERS);
        }
        let cx = read(&[PARENT.as_bytes()], &[long_member.as_bytes(), b"short=1"]);
        assert_eq!(cx.span().span_context().trace_state().header(), "short=1");
        let cx = read(&[PARENT.as_bytes()], &[b"a=1", b"b=2"]);
        assert_eq!(cx.span().span_context().trace_state().header(), "a=1,b=2");
    }

    #[test]
    fn members_past_the_bounds_are_not_read() {
        let many: Vec<String> = (0..10_000).map(|i| format!("k{i}=v")).collect();
        let kept = bounded_tracestate(many.iter().map(|m| m.as_bytes())).unwrap();
        assert_eq!(kept.split(',').count(), MAX_TRACESTATE_MEMBERS);
    }
}
