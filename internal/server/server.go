// Package server is shaper's HTTP surface: /metrics, /healthz, /readyz, and
// the routes other packages mount (enqueue API, control, status page). It
// binds to loopback unless told otherwise and sets every timeout, so a slow
// or hostile client cannot hold connections open. One check, Authorized,
// decides who passes the bearer token: for the protected routes and for
// whatever shows tenant keys.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/metrics"
)

// Options configures a Server.
type Options struct {
	// Addr to listen on; "" means 127.0.0.1:8080. Port 0 picks a free one.
	Addr string
	// Registry serves /metrics; nil serves no metrics.
	Registry *prometheus.Registry
	// Redis is pinged by /readyz; nil means always ready.
	Redis redis.UniversalClient
	// Token, when set, is required as "Authorization: Bearer <token>" by
	// routes mounted with Protected, and by any request that is to see
	// tenant keys (Authorized).
	Token string
	// MetricsKeys serves the series labelled with a tenant key
	// (metrics.KeyLabel, e.g. shaper_fair_key_releases) on /metrics to
	// requests Authorized lets see them; false (http.metrics_keys unset)
	// leaves them out for every request.
	MetricsKeys bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Server serves shaper's HTTP routes.
type Server struct {
	opts Options
	mux  *http.ServeMux
	srv  *http.Server
	ln   net.Listener
}

// New builds the server and its built-in routes.
func New(opts Options) *Server {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:8080"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	if opts.Registry != nil {
		s.mux.Handle("GET /metrics", s.metrics())
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.srv = &http.Server{
		Handler:           s.recoverer(http.HandlerFunc(s.route)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.opts.Redis != nil {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := s.opts.Redis.Ping(ctx).Err(); err != nil {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "redis unreachable"})
			return
		}
	}
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// metrics serves /metrics: the registry, less the series labelled with a
// tenant key unless MetricsKeys is set and the request is Authorized.
func (s *Server) metrics() http.Handler {
	reg := s.opts.Registry
	without := promhttp.HandlerFor(metrics.WithoutKeys(reg), promhttp.HandlerOpts{Registry: reg})
	if !s.opts.MetricsKeys {
		return without
	}
	with := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Authorization")
		if s.Authorized(r) {
			with.ServeHTTP(w, r)
			return
		}
		without.ServeHTTP(w, r)
	})
}

// route serves r through the mux, with ServeMux's own 404 and 405 answers
// (text/plain) turned into JSON like every other body.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern == "" {
		w = &jsonMuxErrors{ResponseWriter: w, r: r}
	}
	s.mux.ServeHTTP(w, r)
}

// jsonMuxErrors rewrites a 404 or 405 written by ServeMux itself.
type jsonMuxErrors struct {
	http.ResponseWriter
	r       *http.Request
	swallow bool
}

func (j *jsonMuxErrors) WriteHeader(code int) {
	var msg string
	switch code {
	case http.StatusNotFound:
		msg = fmt.Sprintf("no such endpoint: %s %s", j.r.Method, j.r.URL.Path)
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s not allowed on %s (allowed: %s)", j.r.Method, j.r.URL.Path, j.Header().Get("Allow"))
	default:
		j.ResponseWriter.WriteHeader(code)
		return
	}
	j.swallow = true
	WriteError(j.ResponseWriter, code, msg)
}

func (j *jsonMuxErrors) Write(b []byte) (int, error) {
	if j.swallow {
		return len(b), nil
	}
	return j.ResponseWriter.Write(b)
}

// recoverer turns a handler panic into a 500 without a stack trace in the
// response (it is logged instead).
func (s *Server) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.opts.Logger.Error("http handler panic", "path", r.URL.Path, "panic", fmt.Sprint(p))
				WriteError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// Handle mounts an open route.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Protected mounts a route that requires the bearer token (when one is
// configured): a request Authorized refuses gets a 401.
func (s *Server) Protected(pattern string, h http.Handler) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shaper"`)
			WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// Authorized reports whether r may use the protected routes and see
// tenant keys: true when no token is configured, else when r carries
// "Authorization: Bearer <token>" (compared in constant time). It is the
// one check behind Protected, the status page's keys and /metrics' keyed
// series.
func (s *Server) Authorized(r *http.Request) bool {
	if s.opts.Token == "" {
		return true
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// bearer returns the credentials of an "Authorization: Bearer <token>"
// header; the scheme's name is case-insensitive (RFC 9110 section 11.1).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// Start listens and serves in the background; it returns the bound address.
func (s *Server) Start() (string, error) {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return "", fmt.Errorf("server: listen on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.opts.Logger.Error("http server stopped", "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// Addr is the bound address after Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown stops accepting and waits for requests in flight.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// WriteError writes {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}
