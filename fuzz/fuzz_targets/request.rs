//! Request::from_parts (and from_config) on arbitrary annotation maps and
//! env lists, keys biased towards the ones it reads.
#![no_main]
use arbitrary::Arbitrary;
use gpuquota_core::request::{EnvRequests, Field, GpuRef, GpuSelector, Request, MAX_GPUS};
use gpuquota_core::units::{Size, MAX_VALUE_LEN};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

const FIELDS: [Field; 3] = [Field::Vram, Field::Gpu, Field::Gpus];
const SANDBOX_KEYS: [&str; 2] = [
    "io.kubernetes.cri.container-type",
    "io.kubernetes.cri-o.ContainerType",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Known(u8),
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Val {
    Str(String),
    Num(i64),
    Bool(bool),
    Null,
    List(Vec<String>),
}

#[derive(Arbitrary, Debug)]
enum EnvVar {
    Known(u8, String),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    annotations: Option<Vec<(Key, Val)>>,
    env: Vec<EnvVar>,
    env_allowed: bool,
}

fn key(k: &Key) -> String {
    match k {
        Key::Known(i) => {
            let f = FIELDS[(*i % 3) as usize];
            f.annotations()[((*i / 3) % 2) as usize].to_string()
        }
        Key::Other(s) => s.clone(),
    }
}

fn val(v: &Val) -> Value {
    match v {
        Val::Str(s) => Value::String(s.clone()),
        Val::Num(n) => json!(n),
        Val::Bool(b) => json!(b),
        Val::Null => Value::Null,
        Val::List(l) => json!(l),
    }
}

fuzz_target!(|input: Input| {
    let ann: Option<Map<String, Value>> = input
        .annotations
        .as_ref()
        .map(|a| a.iter().map(|(k, v)| (key(k), val(v))).collect());
    let env: Vec<String> = input
        .env
        .iter()
        .map(|e| match e {
            EnvVar::Known(i, v) => format!("{}={v}", FIELDS[(*i % 3) as usize].env()),
            EnvVar::Raw(s) => s.clone(),
        })
        .collect();

    let policy = if input.env_allowed {
        EnvRequests::Allowed
    } else {
        EnvRequests::Ignored
    };
    let r = Request::from_parts(ann.as_ref(), &env, policy);
    // deterministic
    assert_eq!(r, Request::from_parts(ann.as_ref(), &env, policy));

    // a container that asks for nothing is left alone
    let annotated = FIELDS.iter().any(|f| {
        f.annotations()
            .iter()
            .any(|k| ann.as_ref().is_some_and(|a| a.contains_key(*k)))
    });
    let env_asks = env
        .iter()
        .any(|e| FIELDS.iter().any(|f| e.starts_with(&format!("{}=", f.env()))));
    if !annotated && !(env_asks && policy == EnvRequests::Allowed) {
        assert_eq!(r, Ok(None));
    }
    // one source: with any request annotation, the environment changes nothing
    if annotated {
        assert_eq!(r, Request::from_parts(ann.as_ref(), &[], policy));
        assert_eq!(r, Request::from_parts(ann.as_ref(), &env, EnvRequests::Ignored));
    }

    match &r {
        Ok(Some(req)) => {
            match req.vram {
                Size::Bytes(b) => assert!(b > 0),
                Size::Ppm(p) => assert!((1..=1_000_000).contains(&p), "{p}"),
            }
            match &req.gpus {
                GpuSelector::Count(n) => assert!((1..=MAX_GPUS).contains(n), "{n}"),
                GpuSelector::All => {}
                GpuSelector::List(l) => {
                    assert!(!l.is_empty() && l.len() <= MAX_GPUS as usize);
                    for (i, g) in l.iter().enumerate() {
                        assert!(!l[..i].contains(g), "duplicate {g}");
                        if let GpuRef::Index(x) = g {
                            assert!(*x < MAX_GPUS);
                        }
                    }
                }
            }
        }
        Ok(None) => {}
        Err(e) => {
            assert!(e.value.chars().count() <= MAX_VALUE_LEN, "{:?}", e.value);
            assert!(!e.to_string().is_empty());
        }
    }

    // from_config reads the same things from a config.json
    let sandbox = ann.as_ref().is_some_and(|a| {
        SANDBOX_KEYS
            .iter()
            .any(|k| a.get(*k).and_then(Value::as_str) == Some("sandbox"))
    });
    let mut config = json!({ "process": { "env": env } });
    if let Some(a) = &ann {
        config["annotations"] = Value::Object(a.clone());
    }
    let c = Request::from_config(&config, policy);
    if sandbox {
        assert_eq!(c, Ok(None));
    } else {
        assert_eq!(c, r);
    }
});
