package embedder_test

import (
	"context"
	"fmt"

	"github.com/pillarkit/pillar/jobs/embedder"
)

func Example() {
	e, err := embedder.Parse("hash:dim=384", nil)
	if err != nil {
		panic(err)
	}
	vecs, err := e.Embed(context.Background(), []string{"vacuum reclaims storage", "VACUUM reclaims storage!"})
	if err != nil {
		panic(err)
	}
	var dot float32
	for i := range vecs[0] {
		dot += vecs[0][i] * vecs[1][i]
	}
	fmt.Println(e.ID(), e.Dims(), len(vecs))
	fmt.Printf("cosine %.2f\n", dot)
	// Output:
	// hash-d384-ea4b8133 384 2
	// cosine 1.00
}
