package resolve

// KeptTokenBytes is how many bytes r keeps of the first token of the pod with
// this key (0: none), for the external tests.
func KeptTokenBytes(r *Resolver, podKey string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods.get(podKey); p != nil && len(p.tokens) > 0 {
		return p.tokens[0].token.Size()
	}
	return 0
}
