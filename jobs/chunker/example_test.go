package chunker_test

import (
	"fmt"

	"github.com/pillarkit/pillar/jobs/chunker"
)

func Example() {
	c, err := chunker.Parse("recursive:size=8,overlap=2")
	if err != nil {
		panic(err)
	}
	text := "Chunkers keep sentences whole. They split long ones at words.\n\nA new paragraph."
	fmt.Println(c.ID())
	for _, k := range c.Chunk(text) {
		fmt.Printf("[%d,%d) %d tokens: %q\n", k.Start, k.End, k.Tokens, text[k.Start:k.End])
	}
	// Output:
	// recursive-s8-o2-6fab448a
	// [0,30) 5 tokens: "Chunkers keep sentences whole."
	// [31,61) 7 tokens: "They split long ones at words."
	// [63,79) 4 tokens: "A new paragraph."
}

func ExampleParse_error() {
	_, err := chunker.Parse("tokens:size=64,overlap=64")
	fmt.Println(err)
	// Output:
	// chunker: spec "tokens:size=64,overlap=64": parameter overlap: must be below size 64, got 64
}
