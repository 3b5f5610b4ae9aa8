module casque.dev/bench/owners

go 1.22
