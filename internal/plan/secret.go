package plan

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/shaper-io/shaper/internal/config"
)

// Secret is a secret the config names by where it is kept (an environment
// variable or a file), never by value. Build records where; Read reads it
// when it is needed (connecting, serving), so a command that does not need
// it (shaper ctl and the HTTP token) never fails for it. Never log what
// Read returns.
type Secret struct {
	// Field is the config field that names the secret, e.g.
	// "redis.password_env"; its errors name it.
	Field string
	// Env names the environment variable that holds it.
	Env string
	// File names the file that holds it (surrounding white space
	// trimmed); used when Env is "".
	File string
}

// IsZero reports whether the config names no secret.
func (s Secret) IsZero() bool { return s.Env == "" && s.File == "" }

// Read reads the secret now; "" when the config names none. An unset or
// empty variable, or an unreadable or empty file, is a *config.Error
// naming Field.
func (s Secret) Read() (string, error) {
	switch {
	case s.Env != "":
		v, ok := os.LookupEnv(s.Env)
		switch {
		case !ok:
			return "", &config.Error{Path: s.Field, Msg: fmt.Sprintf("environment variable %s is not set", s.Env)}
		case v == "":
			return "", &config.Error{Path: s.Field, Msg: fmt.Sprintf("environment variable %s is empty", s.Env)}
		}
		return v, nil
	case s.File != "":
		b, err := os.ReadFile(s.File)
		if err != nil {
			return "", &config.Error{Path: s.Field, Msg: err.Error(), Err: err}
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", &config.Error{Path: s.Field, Msg: fmt.Sprintf("file %s is empty", strconv.Quote(s.File))}
		}
		return v, nil
	}
	return "", nil
}

// String says where the secret is kept, without it: "env:NAME",
// "file:PATH", or "" for none.
func (s Secret) String() string {
	switch {
	case s.Env != "":
		return "env:" + s.Env
	case s.File != "":
		return "file:" + s.File
	}
	return ""
}
