//! The inspection's retries against a scripted conductor, on paused tokio
//! time (no sockets, no real waiting): IPA's back-off, the URLs of a comma
//! list tried in turn, refusals not retried, unusable URLs refused before
//! any call, and the document posted as given.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::*;
use agent_conductor::conductor::fake::{found, http, Call, ScriptedConductor};

const IRONIC: &str = "http://conductor.test:6385/v1/continue_inspection";
const INSPECTOR: &str = "http://inspector.test:5050/v1/continue";

fn unreachable(url: &str) -> ConductorError {
    ConductorError::Unreachable {
        url: url.into(),
        reason: "connection refused".into(),
    }
}

/// The inspection callbacks made: URL, document, time.
fn inspections(c: &ScriptedConductor) -> Vec<(String, Value, Instant)> {
    c.calls()
        .into_iter()
        .filter_map(|(call, t)| match call {
            Call::Inspection { url, doc } => Some((url, doc, t)),
            _ => None,
        })
        .collect()
}

fn doc() -> Value {
    json!({"inventory": {"interfaces": [{"mac_address": "52:54:00:1a:5b:01"}]}, "error": null})
}

#[tokio::test(start_paused = true)]
async fn failures_are_retried_with_ipas_back_off_then_the_answer_is_used() {
    let c = ScriptedConductor::new();
    c.then_inspection(Err(http(503, "the conductor is busy")));
    c.then_inspection(Err(unreachable(IRONIC)));
    c.then_inspection(Err(http(409, "Node is locked by host conductor-1")));
    let answer = InspectionAnswer {
        node_uuid: Some("node-1".into()),
        lookup: Some(found("node-1", Duration::from_secs(300), &"t".repeat(43))),
    };
    c.then_inspection(Ok(answer.clone()));

    let got = post_via(&c, IRONIC, &doc(), &RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(got, answer);
    let calls = inspections(&c);
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|(u, d, _)| u == IRONIC && *d == doc()));
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1].2 - w[0].2).collect();
    assert_eq!(gaps, [5, 10, 20].map(Duration::from_secs));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_final_and_names_the_status() {
    let c = ScriptedConductor::new();
    c.then_inspection(Err(ConductorError::Http {
        url: IRONIC.into(),
        status: 400,
        message: "The inventory contains no interfaces".into(),
    }));
    let e = post_via(&c, IRONIC, &doc(), &RetryPolicy::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, InspectError::Refused { status: 400, .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{IRONIC} refused the inspection data: HTTP 400: The inventory contains no interfaces"
        )
    );
    assert_eq!(inspections(&c).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn each_url_of_a_list_is_tried_in_every_round_until_the_retries_end() {
    let c = ScriptedConductor::new();
    c.then_inspection(Err(unreachable(INSPECTOR)));
    c.then_inspection(Err(ConductorError::Http {
        url: IRONIC.into(),
        status: 500,
        message: "database is down".into(),
    }));
    c.then_inspection(Err(unreachable(INSPECTOR)));
    c.then_inspection(Err(unreachable(IRONIC)));
    let policy = RetryPolicy {
        retries: 1,
        first_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(1),
    };
    let started = Instant::now();
    let e = post_via(&c, &format!("{INSPECTOR}, {IRONIC}"), &doc(), &policy)
        .await
        .unwrap_err();
    assert!(matches!(e, InspectError::Failed { attempts: 4, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "posting inspection data to {IRONIC} failed after 4 attempt(s): cannot reach {IRONIC}: connection refused"
        )
    );
    let urls: Vec<String> = inspections(&c).into_iter().map(|(u, _, _)| u).collect();
    assert_eq!(urls, [INSPECTOR, IRONIC, INSPECTOR, IRONIC]);
    assert_eq!(started.elapsed(), Duration::from_secs(1), "one back-off");
}

#[tokio::test(start_paused = true)]
async fn unusable_callback_urls_are_refused_without_a_call() {
    let c = ScriptedConductor::new();
    for bad in ["", " , ", "not a url", "http://ok.test/v1/continue,nope"] {
        let e = post_via(&c, bad, &doc(), &RetryPolicy::default())
            .await
            .unwrap_err();
        assert!(matches!(e, InspectError::BadUrl(..)), "{bad:?}: {e}");
    }
    assert!(inspections(&c).is_empty());
}

#[test]
fn inspection_goes_where_ipa_13_sends_it() {
    use agent_base::config::{ApiUrls, Config};
    let api = |collectors: bool| Config {
        api_urls: ApiUrls::Urls(vec![
            "http://conductor.test:6385/".into(),
            "https://10.0.0.2:6385".into(),
        ]),
        inspection_collectors_given: collectors,
        ..Config::default()
    };
    // Neither a callback URL nor collectors: no inspection.
    assert_eq!(callback_urls(&api(false)), None);
    // Collectors with ipa-api-url: every API URL's continue_inspection.
    assert_eq!(
        callback_urls(&api(true)).as_deref(),
        Some(format!("{IRONIC},https://10.0.0.2:6385/v1/continue_inspection").as_str())
    );
    // A callback URL wins.
    let c = Config {
        inspection_callback_url: Some(INSPECTOR.into()),
        ..api(true)
    };
    assert_eq!(callback_urls(&c).as_deref(), Some(INSPECTOR));
    // Collectors without ipa-api-url (mdns discovery of the API): none.
    let c = Config {
        api_urls: ApiUrls::Mdns,
        inspection_collectors_given: true,
        ..Config::default()
    };
    assert_eq!(callback_urls(&c), None);
}
