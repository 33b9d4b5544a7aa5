package node

import (
	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selector"
)

// openChannels opens the channel transport a node's event loop serves,
// and the configuration of its selector, for a node configured with
// network and cfg (cfg, if not nil, overrides network).
func openChannels(network string, cfg *rubin.Config) (anytransport.Transport, selector.Config, error) {
	var (
		tcfg anytransport.Config
		scfg selector.Config
	)
	if cfg != nil {
		network = cfg.Transport
		tcfg = anytransport.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget}
		scfg.SpinBudget = cfg.SpinBudget
	}
	if network == "" {
		network = "tcp"
	}
	tr, err := anytransport.Open(network, tcfg)
	return tr, scfg, err
}
