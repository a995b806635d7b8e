//! The session's timing and recovery against a scripted conductor, on
//! paused tokio time (no sockets, no real waiting): lookup back-off and its
//! cap, the sticky waits of a locked node (409), the lookup budget, token
//! rules, heartbeat intervals, retries after failed heartbeats, the early
//! heartbeat after an async command, and re-lookup after the token is lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use agent_conductor::conductor::fake::{found, found_deploying, http, Call, ScriptedConductor};
use agent_core::state::PowerAction;

fn token(c: char) -> String {
    c.to_string().repeat(43)
}

/// Agent state with a 1 s first lookup gap doubling up to `max`, no budget.
fn state_with(max: Duration, events: Option<mpsc::UnboundedSender<AgentEvent>>) -> Arc<AgentState> {
    let config = Config {
        lookup_interval: Duration::from_secs(1),
        lookup_max_interval: max,
        lookup_timeout: Duration::ZERO,
        min_heartbeat_interval: Duration::from_secs(5),
        ..Config::default()
    };
    Arc::new(AgentState::new(config, events))
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

fn is_lookup(c: &Call) -> bool {
    *c == Call::Lookup
}

fn is_heartbeat(c: &Call) -> bool {
    matches!(c, Call::Heartbeat(_))
}

/// Asserts `gap` lies in `[lo, hi]` seconds.
fn within(gap: Duration, lo: f64, hi: f64, what: &str) {
    let s = gap.as_secs_f64();
    assert!(lo <= s && s <= hi, "{what}: {s:.3} s not in [{lo}, {hi}]");
}

#[tokio::test(start_paused = true)]
async fn lookups_back_off_exponentially_with_jitter_up_to_the_cap() {
    let c = ScriptedConductor::new();
    for _ in 0..6 {
        c.then_lookup(Err(http(500, "database is down")));
    }
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('a'))));
    let state = state_with(Duration::from_secs(8), None);
    let r = lookup_until_found(&c, &state, ApiVersion::AUTO_TLS, &[], None)
        .await
        .unwrap();
    assert_eq!(r.node_uuid, "node-1");
    assert_eq!(state.token(), Some(token('a')));
    let g = gaps(&c.times(is_lookup));
    assert_eq!(g.len(), 6);
    for (i, (gap, base)) in g.iter().zip([1.0, 2.0, 4.0, 8.0, 8.0, 8.0]).enumerate() {
        within(*gap, base * 0.5, base * 1.5, &format!("gap {i}"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_locked_node_adds_growing_sticky_waits() {
    let c = ScriptedConductor::new();
    for _ in 0..3 {
        c.then_lookup(Err(http(409, "Node is locked by host conductor-1")));
    }
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('a'))));
    let state = state_with(Duration::from_secs(60), None);
    lookup_until_found(&c, &state, ApiVersion::AUTO_TLS, &[], None)
        .await
        .unwrap();
    let g = gaps(&c.times(is_lookup));
    // 5, 10 and 30 s on top of the back-off of 1, 2 and 4 s × U(0.5, 1.5).
    within(g[0], 5.5, 6.5, "first 409");
    within(g[1], 11.0, 13.0, "second 409");
    within(g[2], 32.0, 36.0, "third 409");
}

#[tokio::test(start_paused = true)]
async fn the_lookup_budget_ends_with_the_last_problem() {
    let c = ScriptedConductor::new();
    let mut state = state_with(Duration::from_secs(4), None);
    Arc::get_mut(&mut state).unwrap().config.lookup_timeout = Duration::from_secs(20);
    let started = Instant::now();
    let e = lookup_until_found(&c, &state, ApiVersion::AUTO_TLS, &[], None)
        .await
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("no node found within 20 s"), "{msg}");
    assert!(msg.contains("the script has no more lookups"), "{msg}");
    let took = started.elapsed().as_secs_f64();
    assert!((20.0..=26.0).contains(&took), "gave up after {took} s");
}

#[tokio::test(start_paused = true)]
async fn a_masked_token_without_a_known_one_keeps_looking_up() {
    let c = ScriptedConductor::new();
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), "******")));
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('b'))));
    let state = state_with(Duration::from_secs(8), None);
    lookup_until_found(&c, &state, ApiVersion::AUTO_TLS, &[], None)
        .await
        .unwrap();
    assert_eq!(
        c.times(is_lookup).len(),
        2,
        "the locked-out answer was not taken"
    );
    assert_eq!(state.token(), Some(token('b')));
    assert!(state.session().lookup.contains("token received"));
}

/// A session after a lookup that gave `token('a')` and `timeout`.
fn session(
    c: &Arc<ScriptedConductor>,
    state: &Arc<AgentState>,
    timeout: Duration,
) -> Session<Arc<ScriptedConductor>> {
    state.set_token(Some(token('a')));
    Session {
        client: c.clone(),
        state: state.clone(),
        version: ApiVersion::AUTO_TLS,
        macs: vec![],
        callback_url: "http://192.0.2.10:9999".into(),
        verify_ca: None,
        lookup: found("node-1", timeout, &token('a')),
        server: None,
        _local_key: None,
    }
}

/// Runs the session's loop; `during` runs alongside, then the loop ends.
async fn run_while(
    s: Session<Arc<ScriptedConductor>>,
    events: mpsc::UnboundedReceiver<AgentEvent>,
    during: impl std::future::Future<Output = ()>,
) {
    let task = tokio::spawn(s.heartbeat_loop(events));
    during.await;
    task.abort();
    let _ = task.await;
}

#[tokio::test(start_paused = true)]
async fn heartbeats_come_every_0_3_to_0_6_heartbeat_timeouts_and_failures_retry_sooner() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_heartbeat(Ok(()))
        .then_heartbeat(Ok(()))
        .then_heartbeat(Err(http(503, "conductor busy")))
        .then_heartbeat(Err(http(503, "conductor busy")));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx));
    let s = session(&c, &state, Duration::from_secs(100));
    run_while(s, rx, tokio::time::sleep(Duration::from_secs(400))).await;
    let g = gaps(&c.times(is_heartbeat));
    assert!(g.len() >= 6, "{g:?}");
    within(g[0], 30.0, 60.0, "after an accepted heartbeat");
    within(g[1], 30.0, 60.0, "after an accepted heartbeat");
    within(g[2], 5.0, 10.0, "after a failed heartbeat");
    within(g[3], 5.0, 10.0, "after a failed heartbeat");
    within(g[4], 30.0, 60.0, "accepted again");
    assert_eq!(
        state.session().heartbeats_accepted as usize,
        g.len() + 1 - 2
    );
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_refused_409_is_retried_within_two_seconds() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_heartbeat(Ok(()))
        .then_heartbeat(Err(http(409, "Node node-1 is locked by host conductor-1")))
        .then_heartbeat(Err(http(409, "Node node-1 is locked by host conductor-1")));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx));
    let s = session(&c, &state, Duration::from_secs(100));
    run_while(s, rx, tokio::time::sleep(Duration::from_secs(100))).await;
    let g = gaps(&c.times(is_heartbeat));
    assert!(g.len() >= 3, "{g:?}");
    within(g[0], 30.0, 60.0, "after an accepted heartbeat");
    within(g[1], 1.0, 2.0, "after a 409");
    within(g[2], 1.0, 2.0, "after a second 409");
    // The session is intact: no lookup, the token kept.
    assert!(c.times(is_lookup).is_empty());
    assert_eq!(state.token(), Some(token('a')));
}

#[tokio::test(start_paused = true)]
async fn an_ended_async_command_brings_the_heartbeat_forward_but_not_before_the_minimum_gap() {
    let c = Arc::new(ScriptedConductor::new());
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx.clone()));
    let s = session(&c, &state, Duration::from_secs(300));
    run_while(s, rx, async {
        // The first heartbeat goes at once; the next would be 90-180 s later.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send(AgentEvent::AsyncCommandFinished).unwrap();
        tokio::time::sleep(Duration::from_secs(20)).await;
    })
    .await;
    let beats = c.times(is_heartbeat);
    assert_eq!(beats.len(), 2, "{beats:?}");
    // min_heartbeat_interval (5 s) after the last heartbeat, not at once.
    within(beats[1] - beats[0], 5.0, 5.001, "early heartbeat");
}

#[tokio::test(start_paused = true)]
async fn a_lost_token_ends_the_operation_and_the_agent_looks_up_again() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_heartbeat(Ok(()))
        .then_heartbeat(Err(http(400, "Invalid or missing agent token received.")));
    c.then_lookup(Err(http(409, "Node is locked")))
        .then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('b'))));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx));
    let s = session(&c, &state, Duration::from_secs(10));
    run_while(s, rx, tokio::time::sleep(Duration::from_secs(60))).await;
    let calls: Vec<Call> = c.calls().into_iter().map(|(c, _)| c).collect();
    assert_eq!(
        calls[..5],
        [
            Call::Heartbeat(token('a')),
            Call::Heartbeat(token('a')),
            Call::Lookup,
            Call::Lookup,
            Call::Heartbeat(token('b')),
        ],
        "{calls:?}"
    );
    assert_eq!(state.token(), Some(token('b')));
}

#[tokio::test(start_paused = true)]
async fn no_heartbeat_goes_while_a_power_action_is_pending() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('b'))));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx.clone()));
    let s = session(&c, &state, Duration::from_secs(300));
    let st = state.clone();
    run_while(s, rx, async {
        // The first heartbeat goes at once. Then a deploy step ends (a
        // heartbeat 5 s after the first would follow) and the conductor
        // orders a power off before that.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send(AgentEvent::AsyncCommandFinished).unwrap();
        st.set_power_pending();
        tokio::time::sleep(Duration::from_secs(9)).await;
        tx.send(AgentEvent::Power(PowerAction::PowerOff)).unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    // Nothing between the first heartbeat and the power event at 10 s.
    assert_held_until_the_power_event(&c, 10.0);
}

/// The calls began with one heartbeat, then nothing until the power event
/// `at` seconds later, then the lookup and a heartbeat with the new token.
fn assert_held_until_the_power_event(c: &ScriptedConductor, at: f64) {
    let calls: Vec<(Call, Instant)> = c.calls();
    let names: Vec<&Call> = calls.iter().map(|(c, _)| c).collect();
    assert_eq!(
        names[..3],
        [
            &Call::Heartbeat(token('a')),
            &Call::Lookup,
            &Call::Heartbeat(token('b')),
        ],
        "{calls:?}"
    );
    within(
        calls[1].1 - calls[0].1,
        at,
        at + 0.5,
        "the lookup after the power event",
    );
}

/// The power command is answered while the loop already waits for the
/// next heartbeat (the fleet's race: Ironic moved the node to `active` and
/// logged the late heartbeat as an error).
#[tokio::test(start_paused = true)]
async fn a_power_command_during_the_wait_holds_the_due_heartbeat() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_lookup(Ok(found("node-1", Duration::from_secs(10), &token('b'))));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(8), Some(tx.clone()));
    // heartbeat_timeout 10 s: the second heartbeat is due 3–6 s after the first.
    let s = session(&c, &state, Duration::from_secs(10));
    let st = state.clone();
    run_while(s, rx, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        st.set_power_pending();
        tokio::time::sleep(Duration::from_secs(11)).await;
        tx.send(AgentEvent::Power(PowerAction::PowerOff)).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    assert_held_until_the_power_event(&c, 12.0);
}

/// The heartbeats' tokens, in order.
fn heartbeat_tokens(c: &ScriptedConductor) -> Vec<String> {
    c.calls()
        .into_iter()
        .filter_map(|(call, _)| match call {
            Call::Heartbeat(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// A deploy's power-off, simulated (host mode): the conductor still answers
/// lookups while it finishes the deploy (first with the old token masked,
/// then, once it wiped it, with a fresh one); none is taken until it
/// refuses one (the node is `active`), so no heartbeat lands in `active`.
#[tokio::test(start_paused = true)]
async fn a_simulated_power_off_takes_no_session_until_the_deploy_is_over() {
    let c = Arc::new(ScriptedConductor::new());
    c.then_lookup(Ok(found_deploying(
        "node-1",
        Duration::from_secs(300),
        "******",
    )))
    .then_lookup(Ok(found_deploying(
        "node-1",
        Duration::from_secs(300),
        &token('c'),
    )))
    .then_lookup(Err(http(404, "Node could not be found")))
    .then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('d'))));
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state_with(Duration::from_secs(2), Some(tx.clone()));
    let s = session(&c, &state, Duration::from_secs(300));
    run_while(s, rx, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tx.send(AgentEvent::Power(PowerAction::PowerOff)).unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    assert_eq!(c.times(is_lookup).len(), 4, "{:?}", c.calls());
    assert_eq!(heartbeat_tokens(&c), [token('a'), token('d')]);
    assert_eq!(state.token(), Some(token('d')));
}

/// After a simulated power-off, an answer for a node with no deploy under
/// way (the conductor began something new, such as cleaning) is taken at
/// once; a simulated reboot holds nothing back.
#[tokio::test(start_paused = true)]
async fn a_simulated_power_off_ends_with_a_new_operation_and_a_reboot_holds_nothing() {
    for (action, expected) in [
        (PowerAction::PowerOff, vec![token('a'), token('d')]),
        (PowerAction::Reboot, vec![token('a'), token('c')]),
    ] {
        let c = Arc::new(ScriptedConductor::new());
        c.then_lookup(Ok(found_deploying(
            "node-1",
            Duration::from_secs(300),
            &token('c'),
        )))
        .then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('d'))));
        let (tx, rx) = mpsc::unbounded_channel();
        let state = state_with(Duration::from_secs(2), Some(tx.clone()));
        let s = session(&c, &state, Duration::from_secs(300));
        run_while(s, rx, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send(AgentEvent::Power(action)).unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
        .await;
        assert_eq!(heartbeat_tokens(&c), expected, "{action:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn huge_lookup_intervals_and_budgets_neither_overflow_nor_panic() {
    let c = ScriptedConductor::new();
    c.then_lookup(Err(http(500, "down")));
    c.then_lookup(Ok(found("node-1", Duration::from_secs(300), &token('a'))));
    let config = Config {
        lookup_interval: Duration::from_secs(u64::MAX),
        lookup_max_interval: Duration::from_secs(3),
        lookup_timeout: Duration::from_secs(u64::MAX),
        ..Config::default()
    };
    let state = Arc::new(AgentState::new(config, None));
    lookup_until_found(&c, &state, ApiVersion::AUTO_TLS, &[], None)
        .await
        .unwrap();
    let g = gaps(&c.times(is_lookup));
    within(g[0], 1.5, 4.5, "capped first gap");
    assert_eq!(jitter(Duration::MAX, 1.0, 2.0), Duration::MAX);
    assert_eq!(deadline(Duration::MAX), None);
}
