use serde_json::{Value, json};

use super::Schema;

fn widget() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5, "minLength": 2},
            "email": {"type": "string", "format": "email"},
            "port": {"x-kubernetes-int-or-string": true},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2, "x-kubernetes-list-type": "set"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
            "note": {"type": "string", "nullable": true},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-validations": [
            {"rule": "self.size <= 5 || self.color == 'blue'", "message": "big widgets are blue"},
            {"rule": "self.size >= oldSelf.size", "message": "size may not shrink"},
        ]},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    }})
}

fn schema() -> Schema {
    Schema::compile(&widget(), "spec.versions[0].schema.openAPIV3Schema").unwrap()
}

fn errors(object: Value, old: Option<Value>) -> Vec<String> {
    let s = schema();
    let mut o = object.as_object().unwrap().clone();
    s.prune(&mut o);
    s.apply_defaults(&mut o).unwrap();
    let old = old.map(|v| v.as_object().unwrap().clone());
    s.validate(&o, old.as_ref())
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn unknown_fields_are_pruned_and_defaults_set() {
    let s = schema();
    let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "x": 1},
        "spec": {"size": 1, "bogus": true, "extra": {"any": {"thing": 1}}, "ports": [{"name": "a", "junk": 1}],
                 "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "junk": 1},
                 "labels": {"a": "b"}},
        "unknown": 1}).as_object().unwrap().clone();
    assert_eq!(
        s.prune(&mut o),
        [
            "spec.bogus",
            "spec.ports[0].junk",
            "spec.template.junk",
            "unknown"
        ]
    );
    s.apply_defaults(&mut o).unwrap();
    assert_eq!(
        Value::Object(o),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "x": 1},
            "spec": {"size": 1, "color": "red", "extra": {"any": {"thing": 1}}, "ports": [{"name": "a"}],
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
                     "labels": {"a": "b"}}})
    );
}

#[test]
fn values_are_refused_with_the_apiservers_messages() {
    let found = errors(
        json!({"spec": {"size": "big", "color": "pink", "name": "ABCDEFG", "email": "nope", "port": true,
            "tags": ["a", "a", "b"], "ports": [{"name": "x"}, {"name": "x"}], "note": null,
            "template": {"spec": {}}, "labels": {"a": 1}}}),
        None,
    );
    let expected = [
        "spec.email: Invalid value: \"nope\": spec.email in body must be of type email: \"nope\"",
        "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
        "spec.name: Too long: may not be more than 5 bytes",
        "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
        "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
        "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"x\"}",
        "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
        "spec.tags: Too many: 3: must have at most 2 items",
        "spec.tags[1]: Duplicate value: \"a\"",
        "spec.template.apiVersion: Required value: must not be empty",
        "spec.template.kind: Required value: must not be empty",
        "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
        "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    ];
    let mut sorted_found = found.clone();
    sorted_found.sort();
    let mut sorted_expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    sorted_expected.sort();
    assert_eq!(sorted_found, sorted_expected, "{found:#?}");
}

#[test]
fn bounds_and_required() {
    assert_eq!(
        errors(json!({"spec": {"size": 0}}), None),
        ["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"]
    );
    assert_eq!(
        errors(json!({"spec": {"size": 11, "color": "blue"}}), None),
        ["spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"]
    );
    assert_eq!(
        errors(json!({"spec": {"size": 1, "name": "a"}}), None),
        ["spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long"]
    );
    assert_eq!(
        errors(json!({"spec": {}}), None),
        [
            "spec.size: Required value",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
    assert_eq!(
        errors(json!({"spec": {"size": 1, "tags": []}}), None),
        ["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"]
    );
    assert!(
        errors(
            json!({"spec": {"size": 2, "note": null, "port": "http", "tags": ["a"]}}),
            None
        )
        .is_empty()
    );
}

#[test]
fn cel_rules_run_with_self_and_old_self() {
    assert_eq!(
        errors(json!({"spec": {"size": 7}}), None),
        ["spec: Invalid value: \"object\": big widgets are blue"]
    );
    assert!(errors(json!({"spec": {"size": 7, "color": "blue"}}), None).is_empty());
    // The transition rule runs on updates only.
    assert_eq!(
        errors(json!({"spec": {"size": 2}}), Some(json!({"spec": {"size": 3}}))),
        ["spec: Invalid value: \"object\": size may not shrink"]
    );
    assert!(errors(json!({"spec": {"size": 3}}), Some(json!({"spec": {"size": 2}}))).is_empty());
}

fn refused(schema: Value) -> Vec<String> {
    match Schema::compile(&schema, "s") {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_schema_the_apiserver_refuses_is_refused() {
    assert_eq!(
        refused(json!({"type": "object", "properties": {"a": {}}})),
        ["s.properties[a].type: Required value: must not be empty for specified object fields"]
    );
    assert_eq!(
        refused(json!({"type": "object", "properties": {"a": {"type": "array"}}})),
        ["s.properties[a].items: Required value: must be specified"]
    );
    assert_eq!(
        refused(json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}})).len(),
        1
    );
    let bad_rule = refused(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a =="}]}));
    assert!(
        bad_rule[0].starts_with(
            "s.x-kubernetes-validations[0].rule: Invalid value: \"self.a ==\": compilation failed: "
        ),
        "{bad_rule:?}"
    );
    let unknown = refused(json!({"type": "object", "x-kubernetes-validations": [{"rule": "isURL(self.a)"}]}));
    assert!(
        unknown[0].contains("undeclared reference to 'isURL'"),
        "{unknown:?}"
    );
    let unknown_var =
        refused(json!({"type": "object", "x-kubernetes-validations": [{"rule": "other.a == 1"}]}));
    assert!(
        unknown_var[0].contains("undeclared reference to 'other'"),
        "{unknown_var:?}"
    );
    // Nested loops over unbounded lists are over budget; bounded, they are not.
    let nested = |max: Option<u64>| {
        let mut list = json!({"type": "array", "items": {"type": "string", "maxLength": 64}});
        if let Some(m) = max {
            list["maxItems"] = json!(m);
        }
        refused(json!({"type": "object", "properties": {"l": list},
            "x-kubernetes-validations": [{"rule": "self.l.all(x, self.l.all(y, x == y))"}]}))
    };
    let over = nested(None);
    assert!(over[0].contains("estimated rule cost exceeds budget"), "{over:?}");
    assert!(nested(Some(100)).is_empty());
    assert_eq!(
        refused(json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}})),
        [
            "s.properties[n].default: Invalid value: \"x\": default in body must be of type integer: \"string\""
        ]
    );
}

#[test]
fn the_cel_functions_declared_are_there() {
    for rule in [
        "'abc'.size() == 3 && size('ab') == 2 && int('1') == 1 && uint(1) == 1u && double(1) == 1.0",
        "string(1) == '1' && bytes('a') == b'a' && bool('true') && type(1) == int && dyn(1) == 1",
        "'abc'.matches('^a') && 'abc'.contains('b') && 'abc'.startsWith('a') && 'abc'.endsWith('c')",
        "'abc'.charAt(1) == 'b' && 'abca'.indexOf('a', 1) == 3 && 'abca'.lastIndexOf('a') == 3",
        "['a', 'b'].join('-') == 'a-b' && 'AbC'.lowerAscii() == 'abc' && 'a'.upperAscii() == 'A'",
        "' a '.trim() == 'a' && 'aa'.replace('a', 'b') == 'bb' && 'a,b'.split(',').size() == 2",
        "'abc'.substring(1) == 'bc' && [1, 1].distinct() == [1] && [[1], [2]].flatten() == [1, 2]",
        "[1, 2].reverse() == [2, 1] && [2, 1].sort() == [1, 2] && [1, 2].all(x, x > 0) && has(self.a)",
    ] {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-validations": [{"rule": rule}]});
        let s = Schema::compile(&schema, "s").unwrap_or_else(|e| panic!("{rule}: {e:?}"));
        let object = json!({"a": 1}).as_object().unwrap().clone();
        assert_eq!(s.validate(&object, None), [], "{rule}");
    }
}

#[test]
fn rules_whose_work_grows_faster_than_the_body_are_refused() {
    let refused_rule = |properties: serde_json::Value, rule: &str, message_expression: Option<&str>| {
        let mut r = json!({"rule": rule});
        if let Some(m) = message_expression {
            r["messageExpression"] = json!(m);
        }
        let found =
            refused(json!({"type": "object", "properties": properties, "x-kubernetes-validations": [r]}));
        found
            .iter()
            .any(|e| e.contains("estimated rule cost exceeds budget") || e.contains("nests deeper"))
    };
    let ints = json!({"l": {"type": "array", "items": {"type": "integer"}}});
    let strings = json!({"s": {"type": "string"}, "l": {"type": "array", "items": {"type": "string"}}});
    let untyped = json!({"d": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    // Linear in the body: taken.
    assert!(!refused_rule(ints.clone(), "self.l.all(x, x > 0)", None));
    assert!(!refused_rule(strings.clone(), "self.s.startsWith('a')", None));
    // Quadratic or worse: refused.
    assert!(refused_rule(ints.clone(), "self.l.all(x, x in self.l)", None));
    assert!(refused_rule(
        ints.clone(),
        "self.l.map(x, self.l).size() > 0",
        None
    ));
    assert!(refused_rule(
        strings.clone(),
        "self.s.replace('', self.s) != ''",
        None
    ));
    assert!(refused_rule(
        strings.clone(),
        "self.l.all(x, x.matches('^a'))",
        None
    ));
    assert!(refused_rule(
        untyped,
        "self.d.all(a, self.d.all(b, self.d.all(c, true)))",
        None
    ));
    assert!(refused_rule(
        ints.clone(),
        "false",
        Some("self.l.map(x, self.l).size() > 0 ? 'a' : 'b'")
    ));
    // Sizes that pass through calls the estimate does not model, map keys, joined strings,
    // and an empty range times an unbounded body.
    assert!(refused_rule(
        ints.clone(),
        "dyn(self.l).all(a, dyn(self.l).all(b, true))",
        None
    ));
    let map = json!({"m": {"type": "object", "additionalProperties": {"type": "integer"}}});
    assert!(refused_rule(
        map.clone(),
        "self.m.all(k, k.split('').all(c, k.contains(c)))",
        None
    ));
    assert!(refused_rule(map, "self.m.all(k, k.replace('', k) != '')", None));
    let bounded = json!({"l": {"type": "array", "maxItems": 1000,
        "items": {"type": "string", "maxLength": 1000}}});
    assert!(refused_rule(
        bounded,
        "self.l.join('').replace('', self.l.join('')) != ''",
        None
    ));
    let empty = json!({"l": {"type": "array", "maxItems": 0, "items": {"type": "string"}},
        "s": {"type": "string"}});
    let six = "self.s.replace('', self.s.replace('', self.s.replace('', self.s.replace('', self.s.replace('', self.s.replace('', self.s))))))";
    assert!(refused_rule(empty, &format!("self.l.all(x, {six} != '')"), None));
    // A chain the evaluator would recurse through to the end of its stack.
    let chain = format!("{}1 == 0", "1 + ".repeat(1500));
    assert!(refused_rule(ints.clone(), &chain, None));
    // The longest rule taken, one chain of operators, parsed on this test's own small stack.
    let longest = format!("{}1 == 0", "1+".repeat(8_000));
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || refused_rule(ints, &longest, None))
        .unwrap()
        .join()
        .unwrap();
    assert!(outcome);
}

#[test]
fn review_cases_match_the_apiserver() {
    // Properties inside allOf need no type (and may not have one).
    let nested = json!({"type": "object", "properties": {"spec": {"type": "object",
        "allOf": [{"properties": {"foo": {"pattern": "^abc"}}}]}}});
    assert!(refused(nested.clone()).is_empty(), "{:?}", refused(nested));
    let typed = json!({"type": "object", "allOf": [{"type": "object"}]});
    assert_eq!(
        refused(typed),
        ["s.allOf[0].type: Forbidden: must be empty to be structural"]
    );
    // Inside them, what only a structural schema may say is refused, what says nothing is not.
    let quiet = json!({"type": "object", "allOf": [{"nullable": false, "x-kubernetes-preserve-unknown-fields": false}]});
    assert!(refused(quiet).is_empty());
    let loud =
        json!({"type": "object", "anyOf": [{"default": {}, "x-kubernetes-validations": [{"rule": "true"}]}]});
    assert_eq!(
        refused(loud),
        [
            "s.anyOf[0].default: Forbidden: must be undefined to be structural",
            "s.anyOf[0].x-kubernetes-validations: Forbidden: must be empty to be structural",
        ]
    );
    // What the root's allOf, anyOf, oneOf and not validate is specified outside them.
    let incomplete = json!({"type": "object",
        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "anyOf": [{"properties": {"spec": {"properties": {"a": {"minLength": 1}, "b": {}}}}},
                  {"not": {"properties": {"status": {}}}}],
        "allOf": [{"properties": {"spec": {"items": {}}}}]});
    assert_eq!(
        refused(incomplete),
        [
            "s.properties[spec].items: Required value: because it is defined in s.allOf[0].properties[spec].items",
            "s.properties[spec].properties[b]: Required value: because it is defined in s.anyOf[0].properties[spec].properties[b]",
            "s.properties[status]: Required value: because it is defined in s.anyOf[1].not.properties[status]",
        ]
    );
    let complete = json!({"type": "object",
        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "oneOf": [{"properties": {"spec": {"required": ["a"], "properties": {"a": {"maxLength": 3}}}}}]});
    assert!(refused(complete.clone()).is_empty(), "{:?}", refused(complete));
    // Nulls in a map of non-nullable values are dropped too.
    let labels = Schema::compile(
        &json!({"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}),
        "s",
    )
    .unwrap();
    let mut o = json!({"labels": {"a": null, "b": "c"}})
        .as_object()
        .unwrap()
        .clone();
    labels.apply_defaults(&mut o).unwrap();
    assert_eq!(Value::Object(o), json!({"labels": {"b": "c"}}));
    // The root's own combinators are checked.
    let root = Schema::compile(
        &json!({"type": "object", "properties": {"spec": {"type": "object"}, "status": {"type": "object"}},
            "oneOf": [{"required": ["spec"]}, {"required": ["status"]}]}),
        "s",
    )
    .unwrap();
    let object = json!({"metadata": {"name": "a"}}).as_object().unwrap().clone();
    assert_eq!(root.validate(&object, None).len(), 1);
    // A null where none may be, with no default, is dropped; with a default, defaulted.
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string", "default": "x"}}}}}),
        "s",
    )
    .unwrap();
    let mut o = json!({"spec": {"a": null, "b": null}})
        .as_object()
        .unwrap()
        .clone();
    s.apply_defaults(&mut o).unwrap();
    assert_eq!(Value::Object(o.clone()), json!({"spec": {"b": "x"}}));
    assert!(s.validate(&o, None).is_empty());
    // A root metadata schema other than name and generateName is refused.
    let meta = json!({"type": "object", "properties": {"metadata": {"type": "object",
        "properties": {"labels": {"type": "object", "default": {"a": "b"}}}}}});
    assert_eq!(refused(meta).len(), 1);
    // multipleOf within a relative epsilon.
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"x": {"type": "number", "multipleOf": 0.1}}}),
        "s",
    )
    .unwrap();
    let o = json!({"x": 0.3}).as_object().unwrap().clone();
    assert!(s.validate(&o, None).is_empty());
    // A rule on the root reports the nil field.
    let s = Schema::compile(
        &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-validations": [{"rule": "has(self.spec)"}]}),
        "s",
    )
    .unwrap();
    let o = json!({"metadata": {"name": "a"}}).as_object().unwrap().clone();
    let found: Vec<String> = s.validate(&o, None).iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        ["<nil>: Invalid value: \"object\": failed rule: has(self.spec)"]
    );
}

#[test]
fn a_long_map_list_is_checked_for_duplicate_keys() {
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"l": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
        "s",
    )
    .unwrap();
    let items: Vec<Value> = (0..200_000).map(|i| json!({"name": format!("n{i}")})).collect();
    let mut o = json!({"l": items}).as_object().unwrap().clone();
    o["l"].as_array_mut().unwrap().push(json!({"name": "n7"}));
    // 200,001 items: checked pairwise this would take minutes; hashed, milliseconds.
    let found = s.validate(&o, None);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].field, "l[200000]");
}

#[test]
fn updates_ratchet_errors_under_unchanged_values() {
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 3},
            "count": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self < 10", "message": "under ten"},
                {"rule": "oldSelf < 5", "message": "was under five"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer", "maximum": 100}}}},
            "sizes": {"type": "array", "items": {"type": "integer", "maximum": 100}},
        }}}}),
        "s",
    )
    .unwrap();
    let check = |new: Value, old: Option<Value>| -> Vec<String> {
        let old = old.map(|o| o.as_object().unwrap().clone());
        s.validate(new.as_object().unwrap(), old.as_ref())
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    // Stored under a looser schema: every value is now out of bounds.
    let stored = json!({"spec": {"name": "toolong", "count": 20,
        "ports": [{"name": "a", "port": 500}], "sizes": [500]}});
    let created = check(stored.clone(), None);
    assert_eq!(created.len(), 4, "{created:?}");
    // An update touching none of them is refused only by the rule that reads oldSelf.
    let mut touched = stored.clone();
    touched["spec"]["extra"] = json!(1);
    assert_eq!(
        check(touched.clone(), Some(stored.clone())),
        ["spec.count: Invalid value: \"integer\": was under five"]
    );
    // A map list's items correlate by key, wherever they move; an atomic list's do not.
    touched["spec"]["ports"] = json!([{"name": "b", "port": 50}, {"name": "a", "port": 500}]);
    touched["spec"]["sizes"] = json!([500, 50]);
    assert_eq!(
        check(touched.clone(), Some(stored.clone())),
        [
            "spec.sizes[0]: Invalid value: 500: spec.sizes[0] in body should be less than or equal to 100",
            "spec.count: Invalid value: \"integer\": was under five",
        ]
    );
    // What changes is validated.
    let mut counted = touched.clone();
    counted["spec"]["count"] = json!(21);
    assert_eq!(
        check(counted, Some(stored.clone())),
        [
            "spec.sizes[0]: Invalid value: 500: spec.sizes[0] in body should be less than or equal to 100",
            "spec.count: Invalid value: \"integer\": under ten",
            "spec.count: Invalid value: \"integer\": was under five",
        ]
    );
    touched["spec"]["name"] = json!("toolong2");
    touched["spec"]["ports"][1]["port"] = json!(600);
    let changed = check(touched, Some(stored));
    assert!(
        changed.iter().any(|e| e.starts_with("spec.name: Too long")),
        "{changed:?}"
    );
    assert!(
        changed.iter().any(|e| e.starts_with("spec.ports[1].port")),
        "{changed:?}"
    );
    // A name too long blocks the rules, as on a create.
    assert!(
        changed.iter().any(|e| e.contains("rules were not checked")),
        "{changed:?}"
    );
}

#[test]
fn a_third_review_the_costs_of_join_index_of_patterns_and_many_rules() {
    let cost_refused = |properties: Value, rules: Vec<&str>| {
        let rules: Vec<Value> = rules.into_iter().map(|r| json!({"rule": r})).collect();
        refused(json!({"type": "object", "properties": properties, "x-kubernetes-validations": rules}))
            .iter()
            .any(|e| e.contains("exceeds budget"))
    };
    // `join` makes items times the separator: 100,000 empty items and a 1 MB separator would
    // be 100 GB.
    let joined = json!({"l": {"type": "array", "maxItems": 100000, "items": {"type": "string", "maxLength": 0}},
        "s": {"type": "string", "maxLength": 1000000}});
    assert!(cost_refused(
        joined.clone(),
        vec!["self.l.join(self.s).size() > 0"]
    ));
    assert!(!cost_refused(
        joined.clone(),
        vec!["self.l.join(',').size() >= 0"]
    ));
    // A naive search: the string times the needle.
    let texts =
        json!({"s": {"type": "string", "maxLength": 2000000}, "t": {"type": "string", "maxLength": 1000000}});
    assert!(cost_refused(texts.clone(), vec!["self.s.indexOf(self.t) >= -1"]));
    assert!(!cost_refused(texts.clone(), vec!["self.s.indexOf('ab') >= -1"]));
    // A pattern read from the object is compiled at each call.
    let patterns =
        json!({"l": {"type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 24}}});
    assert!(cost_refused(
        patterns.clone(),
        vec!["self.l.all(x, !'a'.matches(x))"]
    ));
    assert!(!cost_refused(
        patterns,
        vec!["self.l.all(x, x.matches('^[a-z]+$'))"]
    ));
    // Rules each within budget, over it together.
    let one = "self.s.startsWith('a')";
    assert!(!cost_refused(texts.clone(), vec![one]));
    assert!(cost_refused(texts, vec![one; 200]));
    // Nested literal ranges are estimated in linear time (it was exponential in the depth).
    let mut rule = "[1]".to_owned();
    for _ in 0..30 {
        rule = format!("[{rule}].all(x, x)");
    }
    let started = std::time::Instant::now();
    let _ =
        refused(json!({"type": "object", "x-kubernetes-validations": [{"rule": format!("{rule} || true")}]}));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // A pattern whose program is too large is an error at its evaluation, not a long compile.
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"p": {"type": "string", "maxLength": 24}},
            "x-kubernetes-validations": [{"rule": "!'a'.matches(self.p)"}]}),
        "s",
    )
    .unwrap();
    let object = json!({"p": "(\\w{200}){200}"}).as_object().unwrap().clone();
    let found: Vec<String> = s
        .validate(&object, None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("not a valid regex") && found[0].contains("size limit"),
        "{found:?}"
    );
}

#[test]
fn int_or_string_as_openapi_generators_write_it_is_structural() {
    let any_of =
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]});
    let all_of = json!({"x-kubernetes-int-or-string": true,
        "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+%?$"}]});
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"port": any_of, "surge": all_of}}}});
    assert!(
        refused(schema.clone()).is_empty(),
        "{:?}",
        refused(schema.clone())
    );
    let s = Schema::compile(&schema, "s").unwrap();
    let check = |v: Value| -> Vec<String> {
        s.validate(v.as_object().unwrap(), None)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert!(check(json!({"spec": {"port": 80, "surge": "25%"}})).is_empty());
    assert_eq!(check(json!({"spec": {"port": true}})).len(), 1);
    assert_eq!(check(json!({"spec": {"surge": "many"}})).len(), 1);
    // A field at its zero value is no field, as Go compares them.
    let zeroed = json!({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer", "description": ""}, {"type": "string", "nullable": false}]}}});
    assert!(refused(zeroed.clone()).is_empty(), "{:?}", refused(zeroed));
    // Any default inside anyOf is one, false included.
    let defaulted =
        json!({"type": "object", "properties": {"p": {"type": "boolean", "anyOf": [{"default": false}]}}});
    assert_eq!(
        refused(defaulted),
        ["s.properties[p].anyOf[0].default: Forbidden: must be undefined to be structural"]
    );
    // Anywhere else, and without the extension, a type inside anyOf is still refused.
    let loose =
        json!({"type": "object", "properties": {"p": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}});
    assert!(
        refused(loose.clone())
            .iter()
            .any(|e| e.contains("anyOf[0].type: Forbidden")),
        "{:?}",
        refused(loose)
    );
}

#[test]
fn nested_schemas_say_nothing_of_structure_and_defaults_fill_nulls_within_a_budget() {
    let nested = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"a": {"type": "string"}}},
        "l": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}},
        "anyOf": [{"title": "t", "description": "", "properties": {"metadata": {}}}],
        "allOf": [{"properties": {"l": {"x-kubernetes-list-map-keys": ["a"]}}}]});
    assert_eq!(
        refused(nested),
        [
            "s.allOf[0].properties[l].x-kubernetes-list-map-keys: Forbidden: must be empty to be structural",
            "s.anyOf[0].properties[metadata]: Forbidden: must not be specified in a nested context",
            "s.anyOf[0].title: Forbidden: must be empty to be structural",
            "s.properties[metadata]: Required value: because it is defined in s.anyOf[0].properties[metadata]",
        ]
    );
    // A null list item or map value that may not be null takes its default.
    let s = Schema::compile(
        &json!({"type": "object", "properties": {
            "m": {"type": "object", "additionalProperties": {"type": "string", "default": "d"}},
            "l": {"type": "array", "items": {"type": "string", "default": "d"}}}}),
        "s",
    )
    .unwrap();
    let mut o = json!({"m": {"k": null}, "l": [null, "x"]})
        .as_object()
        .unwrap()
        .clone();
    s.apply_defaults(&mut o).unwrap();
    assert_eq!(
        Value::Object(o.clone()),
        json!({"m": {"k": "d"}, "l": ["d", "x"]})
    );
    assert!(s.validate(&o, None).is_empty());
    // A default copied into each of many items stops at the budget.
    let big = "x".repeat(100_000);
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "object", "properties": {"blob": {"type": "string", "default": big}}}}}}),
        "s",
    )
    .unwrap();
    let mut few = json!({"l": [{}, {}]}).as_object().unwrap().clone();
    s.apply_defaults(&mut few).unwrap();
    assert_eq!(few["l"][1]["blob"].as_str().map(str::len), Some(100_000));
    let many: Vec<Value> = (0..5_000).map(|_| json!({})).collect();
    let mut many = json!({"l": many}).as_object().unwrap().clone();
    assert_eq!(s.apply_defaults(&mut many), Err(super::DefaultsTooLarge));
    let copied = many["l"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i.get("blob").is_some())
        .count();
    assert!(copied * 100_000 <= super::DEFAULTS_BUDGET, "{copied}");
}

#[test]
fn a_schema_with_errors_of_its_own_has_no_rule_errors_and_the_total_names_its_costliest_rules() {
    // A schema that is not structural: its rules are not looked at.
    let mixed = json!({"type": "object", "properties": {
        "a": {"type": "string", "x-kubernetes-validations": [{"rule": "self.nope("}]},
        "b": {}}});
    assert_eq!(
        refused(mixed),
        ["s.properties[b].type: Required value: must not be empty for specified object fields"]
    );
    // Rules each within budget, over it together: the costliest named, then the schema.
    let texts = json!({"s": {"type": "string", "maxLength": 2000000}});
    let rules: Vec<Value> = (0..30)
        .map(|_| json!({"rule": "self.s.startsWith('a')"}))
        .collect();
    let found = refused(json!({"type": "object", "properties": texts, "x-kubernetes-validations": rules}));
    assert_eq!(found.len(), 5, "{found:?}");
    assert_eq!(
        found[0],
        "s.x-kubernetes-validations[0].rule: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
    );
    assert!(
        found[4].starts_with(
            "s: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of "
        ),
        "{found:?}"
    );
}

#[test]
fn a_rules_own_pattern_that_does_not_compile_refuses_the_rule() {
    let found = refused(
        json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 8}},
        "x-kubernetes-validations": [{"rule": "self.s.matches('[')"}]}),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(
            "s.x-kubernetes-validations[0].rule: Invalid value: \"self.s.matches('[')\": compilation failed: program instantiation failed: error parsing regexp"
        ),
        "{found:?}"
    );
    assert!(
        refused(
            json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 8}},
        "x-kubernetes-validations": [{"rule": "self.s.matches('^[a-z]+$')"}]})
        )
        .is_empty()
    );
}
