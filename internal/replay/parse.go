package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shaper-io/shaper/internal/jsontext"
	"github.com/shaper-io/shaper/internal/taskspec"
)

// Arrival is one line of the log.
type Arrival struct {
	// Line is the line number in the log (1-based).
	Line       int
	TS         time.Time
	Downstream string
	Key        string
	Cost       int64

	seq int // its rank among the log's arrivals, from 0
}

// MaxLine is the longest line a log may have, in bytes.
const MaxLine = 1 << 20

// lineFields are the fields an arrival may have.
var lineFields = []string{"ts", "downstream", "key", "cost"}

// Reader reads an arrival log one line at a time, in bounded memory.
// Lines are decoded as strictly as the enqueue CLI and HTTP API decode a
// task (internal/taskspec): one JSON object a line, of known fields, each
// set once, each of its type, and nothing after the object. Blank lines
// and lines starting with # are skipped. Errors name the line.
type Reader struct {
	sc    *bufio.Scanner
	def   string
	line  int
	seq   int
	bytes int64
}

// NewReader reads the log r. def is the downstream of lines that name
// none ("" when the config has several: such a line is an error).
func NewReader(r io.Reader, def string) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return &Reader{sc: sc, def: def}
}

// Next returns the next arrival, or io.EOF after the last.
func (r *Reader) Next() (Arrival, error) {
	for r.sc.Scan() {
		r.line++
		raw := r.sc.Bytes()
		r.bytes += int64(len(raw)) + 1
		line := bytes.TrimSpace(raw)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		a, err := parseLine(line, r.def)
		if err != nil {
			return Arrival{}, fmt.Errorf("replay: line %d: %w", r.line, err)
		}
		a.Line, a.seq = r.line, r.seq
		r.seq++
		return a, nil
	}
	switch err := r.sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return Arrival{}, fmt.Errorf("replay: line %d: longer than %d bytes", r.line+1, MaxLine)
	case err != nil:
		return Arrival{}, fmt.Errorf("replay: reading line %d: %w", r.line+1, err)
	}
	return Arrival{}, io.EOF
}

// Lines is how many lines have been read, skipped ones included.
func (r *Reader) Lines() int { return r.line }

// Bytes is how many bytes of the log those lines hold.
func (r *Reader) Bytes() int64 { return r.bytes }

// Parse reads a whole arrival log (see Reader); for small logs and tests.
func Parse(r io.Reader, def string) ([]Arrival, error) {
	rd := NewReader(r, def)
	var out []Arrival
	for {
		a, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
}

// rawLine is a line's fields as JSON text, nil when left out.
type rawLine struct{ ts, downstream, key, cost []byte }

// parseLine decodes one arrival. Its errors say what is wrong in one line.
func parseLine(line []byte, def string) (Arrival, error) {
	f, err := decodeObject(line)
	if err != nil {
		return Arrival{}, err
	}
	a := Arrival{Downstream: def, Cost: 1}
	if f.ts == nil {
		return a, errors.New("ts: required (RFC 3339 or Unix seconds)")
	}
	if a.TS, err = parseTS(f.ts); err != nil {
		return a, err
	}
	if f.downstream != nil {
		if a.Downstream, err = str("downstream", f.downstream); err != nil {
			return a, err
		}
	}
	if a.Downstream == "" {
		return a, errors.New("downstream: required (the config has several)")
	}
	if f.key != nil {
		if a.Key, err = str("key", f.key); err != nil {
			return a, err
		}
	}
	if f.cost != nil {
		n, err := strconv.ParseInt(string(f.cost), 10, 64)
		if err != nil {
			return a, fmt.Errorf("cost: got %s, want an integer", jsontext.Describe(f.cost))
		}
		if n < 1 {
			return a, fmt.Errorf("cost: must be at least 1, got %d", n)
		}
		a.Cost = n
	}
	return a, nil
}

// decodeObject reads line as one JSON object of known fields, each set
// once, with nothing after it: the rules of taskspec's decodeObject. A
// valid line is split by members without decoding it; an invalid one is
// decoded again to say where and why.
func decodeObject(line []byte) (rawLine, error) {
	var f rawLine
	if !utf8.Valid(line) {
		return f, errors.New("not valid UTF-8")
	}
	if !json.Valid(line) {
		return f, whyInvalid(line)
	}
	if line[0] != '{' {
		return f, fmt.Errorf("got %s, want a JSON object {\"ts\": …, \"downstream\": …, \"key\": …, \"cost\": …}", jsontext.Describe(line))
	}
	i := skipSpace(line, 1)
	for line[i] != '}' {
		k := i
		i = skipValue(line, i)
		name := string(line[k+1 : i-1])
		if bytes.IndexByte(line[k:i], '\\') >= 0 {
			json.Unmarshal(line[k:i], &name)
		}
		i = skipSpace(line, skipSpace(line, i)+1) // the colon
		v := i
		i = skipValue(line, i)
		var dst *[]byte
		switch name {
		case "ts":
			dst = &f.ts
		case "downstream":
			dst = &f.downstream
		case "key":
			dst = &f.key
		case "cost":
			dst = &f.cost
		default:
			return f, fmt.Errorf("unknown field %q (want %s)", jsontext.Clip(name, 40), strings.Join(lineFields, ", "))
		}
		if *dst != nil {
			return f, fmt.Errorf("%s: set twice (each field once: JSON decoders disagree on which one counts)", name)
		}
		*dst = line[v:i]
		if i = skipSpace(line, i); line[i] == ',' {
			i = skipSpace(line, i+1)
		}
	}
	return f, nil
}

// skipSpace returns the index of the first byte from i on that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value at b[i]; b is
// valid JSON.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
			continue
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or literal
			}
			depth--
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
			continue
		default:
			continue
		}
		if depth <= 0 {
			return i + 1
		}
	}
	return i
}

// whyInvalid says why line is not one valid JSON value: where its syntax
// breaks, or that something follows the object.
func whyInvalid(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return jsonError(err, line)
	}
	off := skipSpace(line, int(dec.InputOffset()))
	return fmt.Errorf("unexpected data after the JSON object at column %d (one arrival a line)", jsontext.Column(line, int64(off)+1))
}

// str reads a string field.
func str(field string, v json.RawMessage) (string, error) {
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", fmt.Errorf("%s: got %s, want a string", field, jsontext.Describe(v))
	}
	return s, nil
}

// parseTS reads ts: an RFC 3339 string, or Unix seconds as a number or a
// string.
func parseTS(v json.RawMessage) (time.Time, error) {
	var s string
	if v[0] == '"' {
		if err := json.Unmarshal(v, &s); err != nil {
			return time.Time{}, fmt.Errorf("ts: got %s, want RFC 3339 or Unix seconds", jsontext.Describe(v))
		}
	} else if v[0] == '-' || (v[0] >= '0' && v[0] <= '9') {
		s = string(v)
	} else {
		return time.Time{}, fmt.Errorf("ts: got %s, want RFC 3339 or Unix seconds", jsontext.Describe(v))
	}
	t, err := taskspec.ParseAt(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("ts: %v", err)
	}
	return t, nil
}

// jsonError turns a decoding error into one line with the column.
func jsonError(err error, line []byte) error {
	return errors.New(jsontext.DecodeReason(err, line, `an object {"ts": …, "downstream": …, "key": …, "cost": …}`))
}
