package resolve

import (
	"testing"
	"unique"
)

func TestAPodsTokensAreKeptOnePerRequest(t *testing.T) {
	req := func(aud string) unique.Handle[tokenRequest] {
		return unique.Make(tokenRequest{serviceAccount: "default", audience: aud})
	}
	var ts podTokens
	if n := count(&ts); n != 0 {
		t.Fatalf("no tokens yielded %d", n)
	}
	ts.put(podToken{request: req(""), period: 1})
	ts.put(podToken{request: req("vault"), period: 2})
	ts.put(podToken{request: req("nats"), period: 3})
	ts.put(podToken{request: req("vault"), period: 4}) // a refresh replaces
	got := map[string]int64{}
	for tok := range ts.all() {
		got[tok.request.Value().audience] = int64(tok.period)
	}
	if len(got) != 3 || got[""] != 1 || got["vault"] != 4 || got["nats"] != 3 {
		t.Errorf("tokens %v, want one per request, the vault one replaced", got)
	}
	for tok := range ts.all() {
		tok.period = 9 // changed in place
	}
	for tok := range ts.all() {
		if tok.period != 9 {
			t.Fatal("a token changed through all kept its old value")
		}
	}
}

func count(ts *podTokens) int {
	n := 0
	for range ts.all() {
		n++
	}
	return n
}
