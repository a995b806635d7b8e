//! `agent json-get PATH…`: one value of the JSON document on stdin per
//! path, for executable steps' shell scripts (agent/docs/own-steps.md).
//! A script that picks fields out of its input with `sed` reads whatever
//! key of that name comes last (a `device` in the node's `extra` would
//! override the step's argument); this parses the document.
//!
//! A path is dot-separated keys, a number indexing an array
//! (`args.device`, `disks.0.name`). A string prints as it is, anything
//! else as compact JSON; a path with no value (or `null`) is an error
//! naming it.

use std::io::Read;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

/// Flags of `agent json-get`.
#[derive(Debug, Args)]
pub struct JsonGetArgs {
    /// Paths into the document, e.g. `args.device` or `disks.0.name`.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// The value at `path` in `doc`.
pub(crate) fn get<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, key| match v {
        Value::Object(m) => m.get(key),
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// What `agent json-get` prints for `paths` of the document `input`: one
/// line per path.
pub(crate) fn render(input: &str, paths: &[String]) -> Result<String> {
    let doc: Value = serde_json::from_str(input).context("stdin is not a JSON document")?;
    let mut out = String::new();
    for path in paths {
        match get(&doc, path) {
            None | Some(Value::Null) => bail!("the document has no value at {path:?}"),
            Some(Value::String(s)) => out.push_str(s),
            Some(other) => out.push_str(&other.to_string()),
        }
        out.push('\n');
    }
    Ok(out)
}

/// Runs `agent json-get`.
pub(crate) fn run(args: &JsonGetArgs) -> Result<()> {
    let mut input = String::new();
    std::io::stdin()
        .take(64 << 20)
        .read_to_string(&mut input)
        .context("reading stdin")?;
    print!("{}", render(&input, &args.paths)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::render;

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_step_argument_wins_over_a_key_of_that_name_elsewhere() {
        // Keys sorted as the agent sends them: `node` (with an `extra`
        // holding `device`) comes after `args`.
        let doc = r#"{"args":{"device":"/dev/sdb","label":"data"},"disks":[{"name":"/dev/sda"},{"name":"/dev/sdb"}],"node":{"extra":{"device":"/dev/sda"}},"phase":"clean"}"#;
        assert_eq!(
            render(doc, &paths(&["args.device", "args.label", "phase"])).unwrap(),
            "/dev/sdb\ndata\nclean\n"
        );
        assert_eq!(
            render(doc, &paths(&["disks.1.name"])).unwrap(),
            "/dev/sdb\n"
        );
        assert_eq!(
            render(doc, &paths(&["disks.0"])).unwrap(),
            "{\"name\":\"/dev/sda\"}\n"
        );
    }

    #[test]
    fn a_missing_value_or_a_bad_document_is_an_error_naming_it() {
        let doc = r#"{"args":{"n":null},"a":[1]}"#;
        for p in ["args.device", "args.n", "a.1", "a.x", "args.n.deeper", ""] {
            let e = render(doc, &paths(&[p])).unwrap_err().to_string();
            assert!(e.contains(&format!("{p:?}")), "{p}: {e}");
        }
        let e = render("{\"args\": ", &paths(&["args"])).unwrap_err();
        assert!(e.to_string().contains("not a JSON document"), "{e}");
    }
}
