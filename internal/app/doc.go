// Package app wires shaper's parts together for cmd/shaper: the
// dispatcher, the producer with its admission policies, and the HTTP
// surface, from a config file, or the zero-setup quick start.
package app
