# file: mnist.cu
# what: each epoch trains one step fewer than it should (the graph holds, or is replayed, steps - 1 times)
s/s < (epoch_graph ? steps : 1); s++/s < (epoch_graph ? steps - 1 : 1); s++/
s/replay < (epoch_graph ? 1 : steps); replay++/replay < (epoch_graph ? 1 : steps - 1); replay++/
