package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem with a configuration. It wraps ErrInvalid and Err.
// Its message is one line: "config: [<file>:<line>: | line <n>: ][<path>: ]<msg>".
type Error struct {
	// File is the file Load read; "" for Parse and Validate.
	File string
	// Line is the 1-based line in the YAML; 0 when unknown.
	Line int
	// Path is the field, e.g. "downstreams[1].rate"; "" for syntax errors.
	Path string
	// Msg says what is wrong and quotes the bad value.
	Msg string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(b.String())
}

// Unwrap returns ErrInvalid and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

func errf(path, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// q quotes a value for an error message, shortened if it is long.
func q(s string) string {
	const max = 80
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max]) + "…"
	}
	return strconv.Quote(s)
}
