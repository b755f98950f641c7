package statuspage

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"

	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/shaping"
)

// newKeySalt is the secret of a page's key labels: random, per process,
// so that a label can be neither reversed by hashing guessed keys nor
// compared across processes or restarts.
func newKeySalt() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails: crypto/rand crashes the program rather than return an error
	return b
}

// keyLabel is the label that stands for key on the page of a request that
// may not see keys: "#" and the first 8 hex digits of HMAC-SHA256(salt,
// key), the same for the same key for the life of the page.
func (p *Page) keyLabel(key string) string {
	m := hmac.New(sha256.New, p.keySalt)
	m.Write([]byte(key))
	return "#" + hex.EncodeToString(m.Sum(nil)[:4])
}

// hideKeys replaces every tenant key in s by its label. Counts and
// aggregates (keys waiting, tasks, Jain's index, each key's releases)
// stay.
func (p *Page) hideKeys(s *Snapshot) {
	s.KeysHidden = true
	for i := range s.Downstreams {
		fi := s.Downstreams[i].Fair
		if fi == nil {
			continue
		}
		top := make([]KeyReleases, len(fi.TopKeys))
		for j, kr := range fi.TopKeys {
			top[j] = KeyReleases{Key: p.keyLabel(kr.Key), Hidden: true, Releases: kr.Releases}
		}
		c := *fi
		c.TopKeys = top
		c.KeyControls = make([]KeyControlInfo, len(fi.KeyControls))
		for j, kc := range fi.KeyControls {
			kc.Key, kc.Hidden = p.keyLabel(kc.Key), true
			c.KeyControls[j] = kc
		}
		s.Downstreams[i].Fair = &c
	}
}

// maxKeyControlsShown bounds the key controls a card lists.
const maxKeyControlsShown = 20

// keyControls lists the key controls in force on f, by key, at most
// maxKeyControlsShown, and how many there are.
func keyControls(f *shaping.Fairness) ([]KeyControlInfo, int) {
	all := f.Runtime.All()
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []KeyControlInfo
	for _, k := range keys[:min(len(keys), maxKeyControlsShown)] {
		c := all[k]
		ki := KeyControlInfo{Key: metrics.SafeKey(k), Weight: c.Weight, Paused: c.Paused}
		if !c.Rate.IsZero() {
			ki.Rate = c.Rate.RateString()
		}
		out = append(out, ki)
	}
	return out, len(all)
}

// String is the key's settings in words: "acme 20/s", "bob paused".
func (k KeyControlInfo) String() string {
	parts := []string{k.Key}
	if k.Rate != "" {
		parts = append(parts, k.Rate)
	}
	if k.Weight > 0 {
		parts = append(parts, "weight "+strconv.FormatFloat(k.Weight, 'g', -1, 64))
	}
	if k.Paused {
		parts = append(parts, "paused")
	}
	return strings.Join(parts, " ")
}
