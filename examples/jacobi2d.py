# The jacobi2d program's twin in mpi4py: the same Jacobi iteration (an
# N×N grid, top edge held at 1, the others at 0) in blocks on a 2-D
# Cartesian communicator, each block exchanging its edges with its four
# neighbours by non-blocking sends and receives, convergence checked every
# K iterations, the blocks gathered on rank 0, which prints the line
# jacobi2d.go prints, to the last bit:
#
#   mpiexec -n 4 python3 examples/jacobi2d.py -n 64 -iters 2000 -k 10 -tol 1e-6
#
# integration/examples/jacobi2d_test.go runs it where mpi4py is installed
# and compares its length with jacobi2d.go's.
import argparse

import numpy as np
from mpi4py import MPI

# Halo tags: the edge a block sends, as its neighbour receives it.
TOP_ROW, BOTTOM_ROW, LEFT_COL, RIGHT_COL = range(4)


# block_of returns the interior rows [r0, r1) and columns [c0, c1) of
# rank's block.
def block_of(cart, rank, n):
    (y, x), (rows, cols) = cart.Get_coords(rank), cart.dims
    return y * n // rows, (y + 1) * n // rows, x * n // cols, (x + 1) * n // cols


def main():
    p = argparse.ArgumentParser(
        description="Jacobi iteration in blocks on a 2-D Cartesian communicator, non-blocking halo exchange")
    p.add_argument("-n", type=int, default=64, help="grid size")
    p.add_argument("-iters", type=int, default=2000, help="at most this many iterations")
    p.add_argument("-k", type=int, default=10, help="check convergence every k iterations")
    p.add_argument("-tol", type=float, default=1e-6, help="convergence threshold")
    a = p.parse_args()
    world = MPI.COMM_WORLD
    if a.n < 1 or world.size > a.n or a.iters < 0 or a.k < 1:
        p.error("need -n >= 1, 1 <= processes <= n, -iters >= 0, -k >= 1")

    cart = world.Create_cart(MPI.Compute_dims(world.size, 2), periods=[False, False])
    r0, r1, c0, c1 = block_of(cart, cart.rank, a.n)
    u = np.zeros((r1 - r0 + 2, c1 - c0 + 2))  # the block with a ghost ring
    if r0 == 0:
        u[0, :] = 1  # the top edge
    up, down = cart.Shift(0, 1)  # MPI.PROC_NULL past the grid's edges
    left, right = cart.Shift(1, 1)
    it, diff = 0, 0.0
    while it < a.iters:
        if it > 0 and it % a.k == 0 and cart.allreduce(diff, op=MPI.MAX) <= a.tol:
            break
        reqs, ghosts = [], []
        for peer, send_tag, recv_tag, edge, ghost in (
            (up, TOP_ROW, BOTTOM_ROW, u[1, :], (0, slice(None))),
            (down, BOTTOM_ROW, TOP_ROW, u[-2, :], (-1, slice(None))),
            (left, LEFT_COL, RIGHT_COL, u[1:-1, 1], (slice(1, -1), 0)),
            (right, RIGHT_COL, LEFT_COL, u[1:-1, -2], (slice(1, -1), -1)),
        ):
            if peer == MPI.PROC_NULL:
                continue
            buf = np.empty(len(edge))
            ghosts.append((ghost, buf))
            reqs.append(cart.Irecv(buf, source=peer, tag=recv_tag))
            reqs.append(cart.Isend(np.ascontiguousarray(edge), dest=peer, tag=send_tag))
        MPI.Request.Waitall(reqs)
        for ghost, buf in ghosts:
            u[ghost] = buf
        nxt = u.copy()
        nxt[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        diff = float(np.abs(nxt - u).max())
        u = nxt
        it += 1

    diff = cart.allreduce(diff, op=MPI.MAX)
    blocks = cart.gather(np.ascontiguousarray(u[1:-1, 1:-1]), root=0)
    if cart.rank != 0:
        return
    grid = np.zeros((a.n, a.n))
    for r, b in enumerate(blocks):
        r0, r1, c0, c1 = block_of(cart, r, a.n)
        grid[r0:r1, c0:c1] = b
    total = 0.0
    for v in grid.flat:  # in order, as the Go program adds them
        total += float(v)
    rows, cols = cart.dims
    print("jacobi2d: %d×%d on %d×%d blocks, %d iterations, last change %.3g, sum %.17g"
          % (a.n, a.n, rows, cols, it, diff, total))


if __name__ == "__main__":
    main()
