// Package config loads and validates shaper's YAML configuration, the one
// file shared by the shaper daemon and the enqueue CLI.
//
// Parse decodes strictly (an unknown field is an error), fills defaults and
// validates. Every error is a single line that names the position in the
// file when it is known, the field path and the bad value, and wraps
// ErrInvalid:
//
//	config: shaper.yaml:14: downstreams[1].rate: invalid rate "fast" (want <number>/<unit>, e.g. 50/s)
//
// A field left out of the file gets its default; a field written with a
// zero value keeps it, so "workers: 0" is an error rather than the default
// and "max_retry: 0" means no retries (a zero outside a field's range is
// an error even where a Config built in code reads zero as the default,
// e.g. "concurrency: 0"). A field written as null ("timeout:" or
// "timeout: ~") counts as left out. An integer field written with a
// fraction ("limit: 2.5") is an error, not truncated.
//
// Secrets never live in the file or in a Config: Redis.Password and
// HTTP.Token read the environment (or a file) each time they are called.
//
// testdata/example.yaml documents every field.
package config

import (
	"errors"
	"time"

	"github.com/shaper-io/shaper/internal/sizing"
)

// ErrInvalid is wrapped by every error about a configuration's content;
// test with errors.Is. Errors from reading the file itself (it does not
// exist, permission denied) do not wrap it.
var ErrInvalid = errors.New("config: invalid")

// Defaults for fields left out of the file.
const (
	DefaultRedisTimeout    = 2 * time.Second
	DefaultListen          = "127.0.0.1:8080"
	DefaultMaxBody         = ByteSize(1 << 20)
	DefaultShutdownTimeout = 10 * time.Second
	DefaultBurst           = 1
	DefaultMaxWait         = time.Second
	DefaultMaxRetry        = 25
	DefaultHandlerTimeout  = 10 * time.Second
	DefaultMethod          = "POST"
	DefaultMaxHold         = sizing.DefaultMaxHold
	DefaultRetention       = sizing.DefaultRetention
)

// ListenOff is the HTTP.Listen value that disables the HTTP server. An
// explicit empty listen address in the file becomes ListenOff.
const ListenOff = "off"

const (
	maxDefaultWorkers = 1000 // cap of the computed default
	maxRetryLimit     = 1000
)
