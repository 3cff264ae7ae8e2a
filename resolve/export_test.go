package resolve

// KeptTokenBytes is how many bytes r keeps of the first token of the pod with
// this key (0: none), for the external tests.
func KeptTokenBytes(r *Resolver, podKey string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods.get(podKey); p != nil {
		for t := range p.tokens.all() {
			return t.token.Size()
		}
	}
	return 0
}
