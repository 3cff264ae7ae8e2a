// Command go-provider is vkubelet with one provider more, instant, compiled in
// with package sdk from a module of its own: the whole of a provider author's
// main. Every flag and subcommand is vkubelet's.
//
//	go build -o vkubelet-instant .
//	./vkubelet-instant providers     # instant among the built-in ones
//	./vkubelet-instant --provider instant --nodename edge-1 --kubeconfig ~/.kube/config
package main

import (
	"example.com/go-provider/instant"

	"github.com/vkubelet/vkubelet/sdk"
)

func main() {
	sdk.Main(sdk.Provider{Name: "instant", New: instant.New})
}
