package order

import cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

// UnfinalHeader returns the header of block n if it is cut and not final.
func (a *App) UnfinalHeader(n uint64) *cb.BlockHeader {
	if n < a.final || n >= a.final+uint64(len(a.unfinal)) {
		return nil
	}
	return a.unfinal[n-a.final].block.Header
}
