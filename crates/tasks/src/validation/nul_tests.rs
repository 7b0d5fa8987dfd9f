//! NUL characters, which Postgres cannot store, refused wherever they hide in a request.

use super::*;

#[test]
fn a_nul_character_anywhere_in_a_create_request_is_refused_naming_where() {
    let mut request = CreateTaskRequest {
        task: Some("find it".to_owned()),
        metadata: Some(BTreeMap::from([("k\0ey".to_owned(), "v".to_owned())])),
        ..CreateTaskRequest::default()
    };
    let err = refuse_nul_characters(&request).unwrap_err().to_string();
    assert!(err.contains("metadata.k\\0ey"), "{err}");
    request.metadata = None;
    request.output_schema =
        Some(serde_json::json!({"type": "object", "properties": {"a": {"enum": ["x", "y\0"]}}}));
    let err = refuse_nul_characters(&request).unwrap_err().to_string();
    assert!(err.contains("output_schema.properties.a.enum[1]"), "{err}");
    request.output_schema = None;
    request.task = Some("a\0b".to_owned());
    assert!(refuse_nul_characters(&request).is_err());
    request.task = Some("fine".to_owned());
    assert!(refuse_nul_characters(&request).is_ok());
}
