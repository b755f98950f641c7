package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func start(t *testing.T, token string) string {
	t.Helper()
	s := New(Options{Addr: "127.0.0.1:0", Token: token})
	s.Protected("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	}))
	addr, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return "http://" + addr
}

// Every body is JSON, ServeMux's own 404 and 405 included.
func TestMuxErrorsAreJSON(t *testing.T) {
	t.Parallel()
	base := start(t, "")
	for _, c := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/nope", 404, "no such endpoint: GET /nope"},
		{"GET", "/v1/things", 405, "method GET not allowed on /v1/things (allowed: POST)"},
		{"DELETE", "/healthz", 405, "method DELETE not allowed on /healthz"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct{ Error string }
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &got) != nil || !strings.Contains(got.Error, c.want) {
			t.Errorf("%s %s: %d %s %q, want %d application/json with error %q", c.method, c.path,
				resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status, c.want)
		}
	}
}

// The auth scheme is case-insensitive (RFC 9110 section 11.1).
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	base := start(t, "s3cret")
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"Bearer s3cret", 200}, {"bearer s3cret", 200}, {"BEARER s3cret", 200}, {"Bearer  s3cret", 200},
		{"Bearer wrong", 401}, {"Basic s3cret", 401}, {"s3cret", 401}, {"", 401}, {"Bearers3cret", 401},
	} {
		req, _ := http.NewRequest("POST", base+"/v1/things", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("Authorization %q: status %d, want %d", c.auth, resp.StatusCode, c.status)
		}
	}
}
