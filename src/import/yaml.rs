//! Reading another tool's YAML for an importer: every problem collected at
//! its YAML path (`spec.rateLimit.global.rules[0].limit`) rather than the
//! first one stopping the read, and files of several documents split as
//! kubectl splits them.

use serde::Deserialize as _;
use serde_norway::Value;

use super::Problem;

/// `parent.child`, or `child` at the top level.
pub(super) fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}.{child}")
    }
}

/// `parent[index]`.
pub(super) fn index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// The documents of a file (`---` between them), empty ones left out; or
/// why the file is not YAML.
pub(super) fn documents(yaml: &str) -> Result<Vec<Value>, Problem> {
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(yaml) {
        let value = Value::deserialize(document)
            .map_err(|error| Problem::new("", format!("not valid YAML: {error}")))?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// A mapping's fields, each named by a string, in the file's order.
pub(super) type Fields<'v> = Vec<(String, &'v Value)>;

/// Reads a YAML tree, collecting every problem rather than stopping at the
/// first.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) problems: Vec<Problem>,
}

impl Reader {
    pub(super) fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    /// Reports a problem and gives the placeholder reading carries on with
    /// (`None`, an empty list, `false`).
    pub(super) fn invalid<T: Default>(
        &mut self,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> T {
        self.problem(path, message);
        T::default()
    }

    /// `result`'s value, or `None` with its error reported at `at`.
    pub(super) fn ok<T>(&mut self, at: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|why| self.problem(at, why)).ok()
    }

    /// The fields of a mapping, each named by a string.
    pub(super) fn fields<'v>(
        &mut self,
        value: &'v Value,
        at: &str,
        expected: &str,
    ) -> Option<Fields<'v>> {
        let Value::Mapping(mapping) = value else {
            return self.invalid(at, expected);
        };
        let mut fields = Vec::with_capacity(mapping.len());
        for (name, field) in mapping {
            match name {
                Value::String(name) => fields.push((name.clone(), field)),
                _ => self.problem(at, format!("a field name must be a string, not {name:?}")),
            }
        }
        Some(fields)
    }

    /// The items of a list at `at` (null is an empty list).
    pub(super) fn items<'v>(&mut self, value: &'v Value, at: &str, expected: &str) -> &'v [Value] {
        match value {
            Value::Null => &[],
            Value::Sequence(items) => items,
            _ => {
                self.problem(at, expected);
                &[]
            }
        }
    }

    /// A string field. Like envoyproxy/ratelimit (whose YAML reader takes a
    /// scalar's text for a string), a whole number or a boolean is read as
    /// its text; a fraction is refused, since its text is not kept. `None`
    /// when null (absent) or invalid (reported).
    pub(super) fn text(&mut self, value: &Value, at: &str) -> Option<String> {
        match value {
            Value::Bool(flag) => Some(flag.to_string()),
            Value::Number(number) if number.is_i64() || number.is_u64() => Some(number.to_string()),
            Value::Number(_) => {
                self.invalid(at, "write this number in quotes, as the text it should be")
            }
            _ => self.string(value, at),
        }
    }

    /// A string field that must be written as a string, as Kubernetes reads
    /// one. `None` when null (absent) or invalid (reported).
    pub(super) fn string(&mut self, value: &Value, at: &str) -> Option<String> {
        match value {
            Value::Null => None,
            Value::String(text) => Some(text.clone()),
            _ => self.invalid(at, "must be a string"),
        }
    }

    /// A field that must be there and not be empty.
    pub(super) fn required(&mut self, text: Option<String>, at: &str) -> Option<String> {
        match text {
            Some(text) if !text.is_empty() => Some(text),
            Some(_) => self.invalid(at, "must not be empty"),
            None => {
                self.missing(at, "is required");
                None
            }
        }
    }

    /// A problem for a field that is missing, unless it was there but
    /// invalid and said so.
    pub(super) fn missing(&mut self, at: &str, message: impl Into<String>) {
        if !self.problems.iter().any(|problem| problem.path == at) {
            self.problem(at, message);
        }
    }

    /// Whether a problem was found at `at` or inside it.
    pub(super) fn said_within(&self, at: &str) -> bool {
        self.problems
            .iter()
            .any(|problem| problem.path.starts_with(at))
    }

    /// A `true`/`false` field; null is false.
    pub(super) fn flag(&mut self, value: &Value, at: &str) -> bool {
        match value {
            Value::Bool(flag) => *flag,
            Value::Null => false,
            _ => self.invalid(at, "must be true or false"),
        }
    }

    /// An object's `metadata.name` (required), the path of its `spec`
    /// and the spec's fields (`what` the spec is, for the problem when it
    /// is not a mapping).
    pub(super) fn named_spec<'v>(
        &mut self,
        object: &Object<'v>,
        what: &str,
    ) -> Option<(String, String, Fields<'v>)> {
        let name = self.required(object.name.clone(), &object.path("metadata.name"))?;
        let at = object.path("spec");
        let spec = object.value.get("spec").unwrap_or(&Value::Null);
        let fields = self.fields(spec, &at, &format!("must be a mapping ({what})"))?;
        Some((name, at, fields))
    }

    /// A whole number from 0 to `max`; `None` when null (absent) or
    /// invalid (reported).
    pub(super) fn whole(&mut self, value: &Value, at: &str, max: u64) -> Option<u64> {
        match value {
            Value::Null => None,
            Value::Number(number) if number.as_u64().is_some_and(|n| n <= max) => number.as_u64(),
            _ => self.invalid(at, format!("must be a whole number from 0 to {max}")),
        }
    }
}

/// One object of a file of Kubernetes objects: a document, or an item of
/// a `kind: List` document (as `kubectl get -o yaml` writes several).
pub(super) struct Object<'v> {
    /// What every path in the object starts with: `document 2: ` in a file
    /// of several documents, then `items[0].` in a list; empty in a file of
    /// one object.
    base: String,
    pub(super) api_version: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) name: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) value: &'v Value,
}

impl Object<'_> {
    /// The path of `field` (`spec.rateLimit`) in the file.
    pub(super) fn path(&self, field: &str) -> String {
        format!("{}{field}", self.base)
    }

    /// Where the object is, for a comment: `document 2`, `items[0]`, or
    /// nothing in a file of one object.
    pub(super) fn place(&self) -> &str {
        self.base.trim_end_matches(['.', ':', ' '])
    }

    /// `Kind "namespace/name"`, as far as the object says.
    pub(super) fn label(&self) -> String {
        let kind = self.kind.as_deref().unwrap_or("an object without a kind");
        match (&self.namespace, &self.name) {
            (Some(namespace), Some(name)) => format!("{kind} \"{namespace}/{name}\""),
            (None, Some(name)) => format!("{kind} \"{name}\""),
            _ => kind.to_owned(),
        }
    }
}

/// The objects of `documents`, a list's items in its place; a document
/// that is not a mapping is reported.
pub(super) fn objects<'v>(documents: &'v [Value], reader: &mut Reader) -> Vec<Object<'v>> {
    let mut objects = Vec::new();
    for (i, document) in documents.iter().enumerate() {
        let base = (documents.len() > 1).then(|| format!("document {}: ", i + 1));
        let base = base.unwrap_or_default();
        let read = object(document, base.clone(), reader);
        match (&read, document.get("items")) {
            (Some(list), Some(items)) if list.kind.as_deref() == Some("List") => {
                let at = format!("{base}items");
                for (j, item) in reader
                    .items(items, &at, "must be a list of objects")
                    .iter()
                    .enumerate()
                {
                    objects.extend(object(item, format!("{}.", index(&at, j)), reader));
                }
            }
            _ => objects.extend(read),
        }
    }
    objects
}

fn object<'v>(value: &'v Value, base: String, reader: &mut Reader) -> Option<Object<'v>> {
    if !value.is_mapping() {
        return reader.invalid(
            base.trim_end_matches(['.', ':', ' ']),
            "must be a mapping: a Kubernetes object, or Traefik's dynamic configuration",
        );
    }
    let text = |reader: &mut Reader, field: &str| {
        let at = format!("{base}{field}");
        let mut value = value;
        for part in field.split('.') {
            value = value.get(part).unwrap_or(&Value::Null);
        }
        reader.string(value, &at)
    };
    Some(Object {
        api_version: text(reader, "apiVersion"),
        kind: text(reader, "kind"),
        name: text(reader, "metadata.name"),
        namespace: text(reader, "metadata.namespace"),
        value,
        base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_split_and_empty_ones_left_out() {
        let found = documents("---\na: 1\n---\n---\n# only a comment\n---\nb: 2\n").unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1]["b"].as_u64(), Some(2));
        let error = documents("a: 1\n---\nb: [\n").unwrap_err();
        assert!(error.message.starts_with("not valid YAML: "), "{error:?}");
    }

    #[test]
    fn objects_are_documents_and_the_items_of_lists_each_at_its_place() {
        let docs = documents(
            "kind: A\nmetadata: { name: a }\n---\napiVersion: v1\nkind: List\nitems:\n  - \
             { kind: B, metadata: { name: b, namespace: n } }\n  - { kind: C }\n---\n- 1\n",
        )
        .unwrap();
        let mut reader = Reader::default();
        let found = objects(&docs, &mut reader);
        let seen: Vec<(String, String, String)> = found
            .iter()
            .map(|o| (o.place().to_owned(), o.label(), o.path("spec")))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "document 1".into(),
                    "A \"a\"".into(),
                    "document 1: spec".into()
                ),
                (
                    "document 2: items[0]".into(),
                    "B \"n/b\"".into(),
                    "document 2: items[0].spec".into()
                ),
                (
                    "document 2: items[1]".into(),
                    "C".into(),
                    "document 2: items[1].spec".into()
                ),
            ]
        );
        assert_eq!(reader.problems.len(), 1);
        assert_eq!(reader.problems[0].path, "document 3");
        let one = documents("kind: A\n").unwrap();
        let found = objects(&one, &mut Reader::default());
        assert_eq!(
            (found[0].place(), found[0].path("spec").as_str()),
            ("", "spec")
        );
    }

    #[test]
    fn values_of_the_wrong_kind_are_named_at_their_path() {
        let mut reader = Reader::default();
        let value: Value = serde_norway::from_str("{ s: 1, n: -1, f: yes, l: 3 }").unwrap();
        assert_eq!(reader.string(&value["s"], "s"), None);
        assert_eq!(reader.text(&value["s"], "s"), Some("1".to_owned()));
        assert_eq!(reader.whole(&value["n"], "n", 10), None);
        assert!(!reader.flag(&value["f"], "f"));
        assert!(reader.items(&value["l"], "l", "must be a list").is_empty());
        assert_eq!(reader.whole(&value["absent"], "absent", 10), None);
        let found: Vec<String> = reader
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert_eq!(
            found,
            [
                "s: must be a string",
                "n: must be a whole number from 0 to 10",
                "f: must be true or false",
                "l: must be a list",
            ]
        );
    }
}
