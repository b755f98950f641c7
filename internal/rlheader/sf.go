package rlheader

import "strings"

// members splits a structured field's list at the commas outside quoted
// strings.
func members(v string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(v[start:i]))
				start = i + 1
			}
		}
	}
	if s := strings.TrimSpace(v[min(start, len(v)):]); s != "" {
		out = append(out, s)
	}
	return out
}

// item reads a list member as a structured-field item: its bare item (a
// quoted string unescaped, whatever ; or , it holds) and its parameters
// after it (lower-case keys, quoted values unescaped). ok is false when
// the member is malformed (an unterminated string, text after a string);
// its parameters are then none.
func item(m string) (bare string, params map[string]string, ok bool) {
	s := strings.TrimSpace(m)
	var rest string
	if strings.HasPrefix(s, `"`) {
		if bare, rest, ok = quoted(s); !ok {
			return bare, nil, false
		}
	} else {
		i := strings.IndexByte(s, ';')
		if i < 0 {
			return s, nil, true
		}
		bare, rest = strings.TrimSpace(s[:i]), s[i:]
	}
	params, ok = parameters(rest)
	return bare, params, ok
}

// quoted reads the quoted string s starts with, unescaping \" and \\;
// rest is what follows its closing quote.
func quoted(s string) (str, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), "", false
}

// parameters reads ";key=value" parameters (a key alone is "");
// anything else before or between them makes ok false.
func parameters(s string) (map[string]string, bool) {
	params := map[string]string{}
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return params, true
		}
		if s[0] != ';' {
			return params, false
		}
		s = strings.TrimSpace(s[1:])
		end := strings.IndexAny(s, "=;")
		if end < 0 {
			params[strings.ToLower(s)] = ""
			return params, true
		}
		key := strings.ToLower(strings.TrimSpace(s[:end]))
		if s[end] == ';' {
			params[key], s = "", s[end:]
			continue
		}
		s = strings.TrimSpace(s[end+1:])
		if strings.HasPrefix(s, `"`) {
			v, rest, ok := quoted(s)
			if !ok {
				return params, false
			}
			params[key], s = v, rest
			continue
		}
		end = strings.IndexByte(s, ';')
		if end < 0 {
			end = len(s)
		}
		params[key], s = strings.TrimSpace(s[:end]), s[end:]
	}
}
