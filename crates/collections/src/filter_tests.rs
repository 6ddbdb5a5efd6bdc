use super::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

fn schema() -> Settings {
    let mut attributes = BTreeMap::new();
    attributes.insert("color".to_string(), AttrType::Keyword);
    attributes.insert("price".to_string(), AttrType::Float);
    attributes.insert("qty".to_string(), AttrType::Integer);
    Settings {
        dim: 2,
        metric: crate::schema::Metric::L2,
        element: crate::schema::Element::F32,
        attributes,
    }
}

/// Columns in schema order: color, price, qty.
fn columns(rows: &[(Option<u8>, Option<i8>, Option<i8>)]) -> Vec<Column> {
    let s = schema();
    let mut cols: Vec<Column> = s.attributes.values().map(|t| Column::new(*t)).collect();
    for (c, p, q) in rows {
        let color = c.map(|c| AttrValue::Keyword(format!("c{}", c % 4)));
        cols[0].push(color.as_ref());
        cols[1].push(p.map(|p| AttrValue::Float(p as f64 / 2.0)).as_ref());
        cols[2].push(q.map(|q| AttrValue::Int(q as i64)).as_ref());
    }
    cols
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u8..5).prop_map(|c| json!({"eq": ["color", format!("c{c}")]})),
        (-10i8..10).prop_map(|q| json!({"eq": ["qty", q]})),
        (-10i8..10).prop_map(|p| json!({"eq": ["price", p as f64 / 2.0]})),
        proptest::collection::vec(0u8..5, 0..4).prop_map(
            |cs| json!({"in": ["color", cs.iter().map(|c| format!("c{c}")).collect::<Vec<_>>()]})
        ),
        proptest::collection::vec(-10i8..10, 0..4).prop_map(|qs| json!({"in": ["qty", qs]})),
        (-10i8..10, -10i8..10).prop_map(|(a, b)| json!({"range": ["qty", {"gte": a, "lt": b}]})),
        (-10i8..10, -10i8..10).prop_map(|(a, b)| json!({"range": ["price", {"gt": a, "lte": b}]})),
    ]
}

fn filter() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|fs| json!({"all": fs})),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|fs| json!({"any": fs})),
            inner.prop_map(|f| json!({"not": f})),
        ]
    })
}

/// An independent reading of a filter over plain rows: the definition in the docs.
fn reference(f: &Value, row: &(Option<u8>, Option<i8>, Option<i8>)) -> bool {
    let (op, arg) = f.as_object().unwrap().iter().next().unwrap();
    let value = |field: &str| -> Option<Value> {
        match field {
            "color" => row.0.map(|c| json!(format!("c{}", c % 4))),
            "price" => row.1.map(|p| json!(p as f64 / 2.0)),
            _ => row.2.map(|q| json!(q as f64)),
        }
    };
    let num = |v: &Value| v.as_f64();
    match op.as_str() {
        "eq" | "in" => {
            let field = arg[0].as_str().unwrap();
            let Some(have) = value(field) else {
                return false;
            };
            let wanted: Vec<Value> = if op == "eq" {
                vec![arg[1].clone()]
            } else {
                arg[1].as_array().unwrap().clone()
            };
            wanted.iter().any(|w| match (num(w), num(&have)) {
                (Some(a), Some(b)) => a == b,
                _ => w == &have,
            })
        }
        "range" => {
            let Some(x) = value(arg[0].as_str().unwrap()).and_then(|v| v.as_f64()) else {
                return false;
            };
            arg[1].as_object().unwrap().iter().all(|(k, b)| {
                let b = b.as_f64().unwrap();
                match k.as_str() {
                    "gt" => x > b,
                    "gte" => x >= b,
                    "lt" => x < b,
                    _ => x <= b,
                }
            })
        }
        "all" => arg.as_array().unwrap().iter().all(|f| reference(f, row)),
        "any" => arg.as_array().unwrap().iter().any(|f| reference(f, row)),
        _ => !reference(arg, row),
    }
}

proptest! {
    #[test]
    fn compiled_filters_match_the_definition(
        f in filter(),
        rows in proptest::collection::vec((proptest::option::of(0u8..6), proptest::option::of(-10i8..10), proptest::option::of(-10i8..10)), 0..60),
    ) {
        let parsed = Filter::parse(&f, &schema()).unwrap();
        let cols = columns(&rows);
        let compiled = parsed.compile(&cols);
        for (slot, row) in rows.iter().enumerate() {
            let want = reference(&f, row);
            prop_assert_eq!(parsed.matches(&cols, slot), want, "{} on {:?}", f, row);
            prop_assert_eq!(compiled.matches(&cols, slot), want, "{} on {:?}", f, row);
        }
    }

    /// Whatever JSON arrives, parsing answers (an error or a filter), never panics.
    #[test]
    fn any_json_parses_or_is_refused(s in "[\\[\\]{}\",:a-z0-9 ]{0,40}") {
        if let Ok(v) = serde_json::from_str::<Value>(&s) {
            let _ = Filter::parse(&v, &schema());
        }
    }
}

#[test]
fn bad_filters_are_refused_clearly() {
    let s = schema();
    let err = |v: Value| Filter::parse(&v, &s).unwrap_err().message;
    assert!(err(json!({"eq": ["size", 1]})).contains("unknown attribute \"size\""));
    assert!(err(json!({"eq": ["qty", "x"]})).contains("expected an integer"));
    assert!(err(json!({"eq": ["qty", 1.5]})).contains("expected an integer"));
    assert!(err(json!({"eq": ["color", 3]})).contains("expected a string"));
    assert!(err(json!({"range": ["color", {"gt": 1}]})).contains("not keywords"));
    assert!(err(json!({"range": ["qty", {"above": 1}]})).contains("unknown bound"));
    assert!(err(json!({"range": ["qty", {}]})).contains("no bounds"));
    assert!(err(json!({"near": ["qty", 1]})).contains("unknown filter operator"));
    assert!(err(json!({"eq": ["qty", 1], "in": ["qty", [1]]})).contains("one key"));
    assert!(err(json!([1])).contains("one key"));
    let mut deep = json!({"eq": ["qty", 1]});
    for _ in 0..limits::MAX_FILTER_DEPTH {
        deep = json!({ "not": deep });
    }
    assert!(err(deep).contains("deeper than the limit of 16"));
    let mut ok = json!({"eq": ["qty", 1]});
    for _ in 0..limits::MAX_FILTER_DEPTH - 1 {
        ok = json!({ "not": ok });
    }
    Filter::parse(&ok, &s).unwrap();
    let wide = json!({"any": vec![json!({"eq": ["qty", 1]}); limits::MAX_FILTER_NODES]});
    assert_eq!(Filter::parse(&wide, &s).unwrap_err().kind, Kind::TooLarge);
}

#[test]
fn missing_values_match_nothing_but_not() {
    let cols = columns(&[(None, None, None)]);
    let f = Filter::parse(&json!({"not": {"eq": ["qty", 1]}}), &schema()).unwrap();
    assert!(f.matches(&cols, 0) && f.compile(&cols).matches(&cols, 0));
    let f = Filter::parse(&json!({"range": ["qty", {"lt": 100}]}), &schema()).unwrap();
    assert!(!f.matches(&cols, 0) && !f.compile(&cols).matches(&cols, 0));
}

#[test]
fn large_integers_compare_exactly() {
    let s = schema();
    let mut cols: Vec<Column> = s.attributes.values().map(|t| Column::new(*t)).collect();
    let big = 1i64 << 60;
    for x in [big, big + 1] {
        cols[0].push(None);
        cols[1].push(None);
        cols[2].push(Some(&AttrValue::Int(x)));
    }
    for (f, want) in [
        (json!({"eq": ["qty", big + 1]}), [false, true]),
        (json!({"in": ["qty", [big]]}), [true, false]),
        (json!({"range": ["qty", {"gt": big}]}), [false, true]),
        (json!({"range": ["qty", {"lte": big}]}), [true, false]),
    ] {
        let p = Filter::parse(&f, &s).unwrap();
        let c = p.compile(&cols);
        for (slot, w) in want.iter().enumerate() {
            assert_eq!(p.matches(&cols, slot), *w, "{f} slot {slot}");
            assert_eq!(c.matches(&cols, slot), *w, "{f} slot {slot}");
        }
    }
}
