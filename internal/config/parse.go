package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads and parses the file at path. Errors about its content name
// the file and line, e.g. "config: shaper.yaml:14: downstreams[1].rate: …".
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if e, ok := errors.AsType[*Error](err); ok {
		e.File = path
	}
	return c, err
}

// Parse decodes a YAML document strictly, fills the defaults and validates
// the result. The error, if any, is an *Error.
func Parse(data []byte) (*Config, error) {
	// First as a node tree: syntax errors, line numbers, and which fields
	// the file sets (a default fills only a field that is left out).
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &Error{Line: extra.Line, Msg: "more than one YAML document (remove the second ---)"}
	case err != io.EOF:
		return nil, syntaxError(err)
	}
	idx := newIndex(&root)

	// Then into the structs, rejecting unknown fields.
	c := new(Config)
	if len(root.Content) > 0 {
		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		if err := strict.Decode(c); err != nil {
			return nil, idx.decodeError(err)
		}
	}
	if e := idx.checkWhole(); e != nil {
		return nil, e
	}
	if e := c.fill(idx.isSet); e != nil {
		e.Line = idx.line(e.Path)
		return nil, e
	}
	if e := c.validate(); e != nil {
		e.Line = idx.line(e.Path)
		return nil, e
	}
	return c, nil
}

// Validate checks a complete Config (as Parse returns it: Validate fills
// no defaults). The error, if any, is an *Error naming the first bad field.
func (c *Config) Validate() error {
	if e := c.validate(); e != nil {
		return e
	}
	return nil
}

var reSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxError(err error) *Error {
	msg := err.Error()
	if m := reSyntax.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Line: line, Msg: m[2]}
	}
	return &Error{Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// index maps the fields of a YAML node tree to their lines, and lines back
// to fields, so that errors can name both.
type index struct {
	lines   map[string]int    // path → line of its key or sequence item
	set     map[string]bool   // paths the file sets to something other than null
	frac    map[string]string // paths set to a number that is not whole → its text
	entries []entry           // every node and key, in document order
	budget  int               // nodes left to visit (aliases can multiply them)
}

type entry struct {
	path  string
	line  int
	kind  yaml.Kind
	key   bool // a mapping key, not a value
	value string
	depth int
}

func newIndex(root *yaml.Node) *index {
	x := &index{lines: map[string]int{}, set: map[string]bool{}, frac: map[string]string{}, budget: 1 << 16}
	x.walk(root, "", 0)
	return x
}

func (x *index) isSet(path string) bool { return x.set[path] }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (x *index) walk(n *yaml.Node, path string, depth int) {
	x.budget--
	if x.budget < 0 || depth > 100 {
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			x.walk(c, path, depth)
		}
		return
	case yaml.AliasNode:
		if n.Alias != nil {
			x.walk(n.Alias, path, depth+1)
		}
		return
	}
	x.entries = append(x.entries, entry{path: path, line: n.Line, kind: n.Kind, value: n.Value, depth: depth})
	switch n.Kind {
	case yaml.MappingNode:
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				merges = append(merges, v)
				continue
			}
			x.field(path, k, v, depth)
		}
		// Merged keys (<<: *anchor) count where the mapping does not set them.
		for len(merges) > 0 {
			m := merges[0]
			merges = merges[1:]
			for m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			switch m.Kind {
			case yaml.SequenceNode:
				merges = append(merges, m.Content...)
			case yaml.MappingNode:
				for i := 0; i+1 < len(m.Content); i += 2 {
					if p := join(path, m.Content[i].Value); x.lines[p] == 0 {
						x.field(path, m.Content[i], m.Content[i+1], depth)
					}
				}
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			x.mark(p, c)
			x.walk(c, p, depth+1)
		}
	}
}

func (x *index) field(path string, k, v *yaml.Node, depth int) {
	p := join(path, k.Value)
	if x.lines[p] == 0 {
		x.lines[p] = k.Line
	}
	x.mark(p, v)
	x.entries = append(x.entries, entry{path: p, line: k.Line, kind: k.Kind, key: true, value: k.Value, depth: depth + 1})
	x.walk(v, p, depth+1)
}

func (x *index) mark(p string, v *yaml.Node) {
	if x.lines[p] == 0 {
		x.lines[p] = v.Line
	}
	if v.ShortTag() != "!!null" {
		x.set[p] = true
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
		if f, err := strconv.ParseFloat(v.Value, 64); err != nil || f != math.Trunc(f) {
			x.frac[p] = v.Value
		}
	}
}

// checkWhole refuses a number with a fraction (or .inf, .nan) written
// for an integer field: the decoder would truncate it (limit: 2.5 is 2).
func (x *index) checkWhole() *Error {
	var bad []string
	for p := range x.frac {
		if isIntField(p) {
			bad = append(bad, p)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.SortFunc(bad, func(a, b string) int { return cmp.Compare(x.line(a), x.line(b)) })
	e := errf(bad[0], "must be a whole number, got %s", x.frac[bad[0]])
	e.Line = x.line(bad[0])
	return e
}

// rePathStep is one step of a field path: a key or a [index].
var rePathStep = regexp.MustCompile(`\[[0-9]+\]|[^.\[]+`)

// isIntField reports whether path names an integer field of Config.
func isIntField(path string) bool {
	t := reflect.TypeFor[Config]()
	for _, step := range rePathStep.FindAllString(path, -1) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case step[0] == '[' && t.Kind() == reflect.Slice:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			f, ok := yamlField(t, step)
			if !ok {
				return false
			}
			t = f.Type
		default: // maps (keys may hold dots) and any: no integer fields
			return false
		}
	}
	return t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
}

// yamlField is the field of struct type t that the file calls name.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); n == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// line is the line of path, or of its nearest ancestor in the file.
func (x *index) line(path string) int {
	for path != "" {
		if l := x.lines[path]; l > 0 {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// at finds the entry that an error message about line is about: a key or
// value it quotes, else the deepest node of the kind it names, else the
// first node on the line.
func (x *index) at(line int, msg string) (entry, bool) {
	var best entry
	bestScore := -1
	for _, e := range x.entries {
		if e.line != line {
			continue
		}
		score := 0
		switch {
		case e.key && (strings.Contains(msg, "field "+e.value+" not found") || strings.Contains(msg, "mapping key "+strconv.Quote(e.value))):
			score = 3
		case !e.key && e.kind == yaml.ScalarNode && (strings.Contains(msg, strconv.Quote(e.value)) || strings.Contains(msg, "`"+e.value+"`") ||
			len(e.value) > 10 && strings.Contains(msg, "`"+e.value[:7]+"...`")):
			score = 2
		case !e.key && (e.kind == yaml.MappingNode && strings.Contains(msg, "!!map") || e.kind == yaml.SequenceNode && strings.Contains(msg, "!!seq")):
			score = 1
		}
		if score > bestScore || score == 1 && bestScore == 1 && e.depth > best.depth {
			best, bestScore = e, score
		}
	}
	return best, bestScore >= 0
}

var (
	reTypeLine  = regexp.MustCompile(`^line (\d+): (.*)$`)
	reNotFound  = regexp.MustCompile(`^field (.*) not found in type (\S+)$`)
	reUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `.*`)? into (\\S+)$")
	reDupKey    = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
)

// decodeError turns an error of the strict decoder into one line that
// names the field.
func (x *index) decodeError(err error) *Error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return syntaxError(err)
	}
	e := &Error{Msg: te.Errors[0]}
	if m := reTypeLine.FindStringSubmatch(te.Errors[0]); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
		if ent, ok := x.at(e.Line, e.Msg); ok {
			e.Path = ent.path
			e.Msg = explain(e.Msg, ent)
		}
	}
	if n := len(te.Errors) - 1; n == 1 {
		e.Msg += " (and 1 more error)"
	} else if n > 1 {
		e.Msg += fmt.Sprintf(" (and %d more errors)", n)
	}
	return e
}

// explain rewrites a yaml.v3 decoding message in this package's terms.
func explain(msg string, at entry) string {
	if m := reNotFound.FindStringSubmatch(msg); m != nil {
		s := fmt.Sprintf("unknown field %s", q(m[1]))
		if t, ok := schema[m[2]]; ok && t.Kind() == reflect.Struct {
			s += " (want one of " + strings.Join(yamlFields(t), ", ") + ")"
		}
		return s
	}
	if m := reDupKey.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("duplicate key %s (first at line %s)", m[1], m[2])
	}
	if m := reUnmarshal.FindStringSubmatch(msg); m != nil {
		want := "a " + m[2]
		if t, ok := schema[m[2]]; ok {
			want = kindName(t)
		}
		if at.kind == yaml.ScalarNode && !at.key {
			return fmt.Sprintf("invalid value %s (want %s)", q(at.value), want)
		}
		got := m[1]
		switch got {
		case "map":
			got = "mapping"
		case "seq":
			got = "list"
		}
		return fmt.Sprintf("got a %s, want %s", got, want)
	}
	return msg
}

// schema maps the name of every type in Config, as reflect prints it, to
// the type, for error messages.
var schema = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	var add func(reflect.Type)
	add = func(t reflect.Type) {
		if _, ok := m[t.String()]; ok {
			return
		}
		m[t.String()] = t
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				add(t.Field(i).Type)
			}
		case reflect.Map:
			add(t.Key())
			add(t.Elem())
		case reflect.Slice, reflect.Pointer:
			add(t.Elem())
		}
	}
	add(reflect.TypeFor[Config]())
	return m
}()

func yamlFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return kindName(t.Elem())
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}
