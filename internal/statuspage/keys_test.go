package statuspage_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// getAuth is GET url with the bearer token (none when ""): body and status.
func getAuth(t *testing.T, url, token string) (string, int) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode
}

func snapshotAuth(t *testing.T, b *bundle, token string) (statuspage.Snapshot, string) {
	t.Helper()
	body, code := getAuth(t, b.url+"/status.json", token)
	var s statuspage.Snapshot
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("GET /status.json: %d %.200s, want 200 and a snapshot", code, body)
	}
	return s, body
}

// With a token configured, the status page, its JSON and /metrics show a
// tenant key only to a request with the token; the others see counts and
// a stable label per key. A key with a bidi override and a control
// character is shown escaped wherever it is shown.
func TestTenantKeysNeedTheToken(t *testing.T) {
	const token = "s3cret-token"
	b := setup(t, setupOpts{token: token, metricsKeys: true,
		yaml: "downstreams:\n  - {name: api, rate: 50/s, fairness: {key: tenant}, handler: {type: log}}\n"})
	b.start(t)
	const plain = "acme-secret-tenant"
	evil := "evil\u202eexe.txt\x07bell\u2066x\u200f"
	const shown = `evil\u202eexe.txt\u0007bell\u2066x\u200f`
	for i := range 20 {
		key := []string{plain, evil}[i%2]
		if _, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	var withKeys statuspage.Snapshot
	waitFor(t, 20*time.Second, "both keys among the top keys of a request with the token", func() bool {
		withKeys, _ = snapshotAuth(t, b, token)
		fi := ds(withKeys, "api").Fair
		return fi != nil && len(fi.TopKeys) == 2 && fi.TopKeys[0].Releases+fi.TopKeys[1].Releases >= 20
	})

	// With the token: the keys, the bidi key escaped, on every surface.
	got := map[string]bool{}
	for _, kr := range ds(withKeys, "api").Fair.TopKeys {
		got[kr.Key] = true
		if kr.Hidden {
			t.Errorf("key %q is marked hidden for a request with the token", kr.Key)
		}
	}
	if !got[plain] || !got[shown] || withKeys.KeysHidden {
		t.Errorf("top keys with the token %v (keys_hidden %v), want %q and %q shown", got, withKeys.KeysHidden, plain, shown)
	}
	_, rawJSON := snapshotAuth(t, b, token)
	html, _ := getAuth(t, b.url+"/", token)
	metrics, _ := getAuth(t, b.url+"/metrics", token)
	for name, body := range map[string]string{"/status.json": rawJSON, "/": html, "/metrics": metrics} {
		if !strings.Contains(body, plain) {
			t.Errorf("%s with the token does not show the key %q", name, plain)
		}
		if strings.ContainsAny(body, "\u202e\u2066\u200f\x07") {
			t.Errorf("%s with the token carries a raw bidi or control character", name)
		}
	}
	if !strings.Contains(html, shown) {
		t.Errorf("the page with the token does not show the key escaped as %q", shown)
	}
	if want := `key="` + strings.ReplaceAll(shown, `\`, `\\`) + `"`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics with the token has no series labelled %s", want)
	}

	// Without the token, or with a wrong one: no key anywhere, counts stay.
	label := regexp.MustCompile(`^#[0-9a-f]{8}$`)
	for _, tok := range []string{"", "wrong"} {
		s, raw := snapshotAuth(t, b, tok)
		fi := ds(s, "api").Fair
		if !s.KeysHidden || fi == nil || len(fi.TopKeys) != 2 {
			t.Fatalf("token %q: keys_hidden %v, fair %+v, want hidden and 2 top keys", tok, s.KeysHidden, fi)
		}
		for _, kr := range fi.TopKeys {
			if !kr.Hidden || !label.MatchString(kr.Key) || kr.Releases < 1 {
				t.Errorf("token %q: top key %+v, want hidden, a #xxxxxxxx label and its releases", tok, kr)
			}
		}
		if got, want := releases(fi), releases(ds(withKeys, "api").Fair); got != want || fi.JainIndex <= 0 {
			t.Errorf("token %q: %v releases over the top keys, Jain %v; want %v as with the token, and the index", tok, got, fi.JainIndex, want)
		}
		again, _ := snapshotAuth(t, b, tok)
		if first, second := keySet(fi), keySet(ds(again, "api").Fair); first != second {
			t.Errorf("token %q: labels %s then %s, want them stable", tok, first, second)
		}
		page, _ := getAuth(t, b.url+"/", tok)
		mets, code := getAuth(t, b.url+"/metrics", tok)
		if code != 200 || !strings.Contains(mets, "shaper_fair_jain_index") {
			t.Errorf("token %q: /metrics %d without the fair aggregates", tok, code)
		}
		if strings.Contains(mets, "shaper_fair_key_releases") {
			t.Errorf("token %q: /metrics serves the per-key series", tok)
		}
		for name, body := range map[string]string{"/status.json": raw, "/": page, "/metrics": mets} {
			for _, k := range []string{"acme", "evil", "exe.txt"} {
				if strings.Contains(body, k) {
					t.Errorf("token %q: %s shows %q", tok, name, k)
				}
			}
		}
		if !strings.Contains(page, "key names need the token") {
			t.Errorf("token %q: the page does not say the key names need the token", tok)
		}
	}
}

func releases(fi *statuspage.FairInfo) float64 {
	n := 0.0
	for _, kr := range fi.TopKeys {
		n += kr.Releases
	}
	return n
}

func keySet(fi *statuspage.FairInfo) string {
	var ks []string
	for _, kr := range fi.TopKeys {
		ks = append(ks, kr.Key)
	}
	sort.Strings(ks) // keys with equal releases come in any order
	return strings.Join(ks, ",")
}

// The key controls an operator set (shaper ctl key) reach the card within
// the control loop's interval: each key's rate, weight or pause in the
// JSON and in words on the page; without the token the keys are labels.
func TestKeyControlsShown(t *testing.T) {
	const token = "s3cret-token"
	b := setup(t, setupOpts{token: token,
		yaml: "downstreams:\n  - {name: api, rate: 50/s, fairness: {key: tenant}, handler: {type: log}}\n"})
	b.start(t)
	ctl := b.d.Control()
	ctx := context.Background()
	if err := ctl.SetKeyRate(ctx, "api", "acme", limiters.PerSecond(5)); err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetKeyWeight(ctx, "api", "acme", 3); err != nil {
		t.Fatal(err)
	}
	if err := ctl.PauseKey(ctx, "api", "bob"); err != nil {
		t.Fatal(err)
	}
	var s statuspage.Snapshot
	waitFor(t, 10*time.Second, "two key controls on the card", func() bool {
		s, _ = snapshotAuth(t, b, token)
		fi := ds(s, "api").Fair
		return fi != nil && fi.KeyControlCount == 2
	})
	kcs := ds(s, "api").Fair.KeyControls
	if len(kcs) != 2 || kcs[0] != (statuspage.KeyControlInfo{Key: "acme", Rate: "5/s", Weight: 3}) || kcs[1] != (statuspage.KeyControlInfo{Key: "bob", Paused: true}) {
		t.Errorf("key controls %+v, want acme 5/s weight 3 and bob paused", kcs)
	}
	mets, _ := getAuth(t, b.url+"/metrics", token)
	for _, want := range []string{`shaper_fair_key_controls{control="paused",downstream="api"} 1`,
		`shaper_fair_key_controls{control="rate",downstream="api"} 1`, `shaper_fair_key_controls{control="weight",downstream="api"} 1`} {
		if !strings.Contains(mets, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	page, _ := getAuth(t, b.url+"/", token)
	if !strings.Contains(page, "key controls: acme 5/s weight 3, bob paused") {
		t.Errorf("the page does not list the key controls in words")
	}
	hidden, _ := snapshotAuth(t, b, "")
	for _, kc := range ds(hidden, "api").Fair.KeyControls {
		if !kc.Hidden || strings.Contains(kc.Key, "acme") || strings.Contains(kc.Key, "bob") {
			t.Errorf("without the token: key control %+v, want a hidden label", kc)
		}
	}
}
