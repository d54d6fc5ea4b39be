"""What the tensor-core families (``splitk``, ``mma``, ``ring``) share: mma.sync m16n8k16 tiles over 32-half d pieces
(FP16 or BF16 operands, FP32 accumulation, 16-byte W loads), n padded to n8 tiles, d cut into chunks and the chunks into splits
(grid.y), and the padded row length of an X slice staged in shared memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shapes import Shape

PIECE = 32   # halves of d per 16-byte piece of each lane of a warp: 4 lanes x 8 halves per row


class TensorCoreTiles:
    """Mixin of the tensor-core config dataclasses; ``kv`` (16-byte pieces per lane and row in a chunk) is 1
    unless the family makes it a parameter."""

    acc = "fp32"          # tensor-core accumulation is FP32 for FP16 and BF16 inputs alike (sets the error bound)
    vec_elems = 8         # W is read in 16-byte pieces (sets the alignment the dispatcher checks)
    kv = 1

    if TYPE_CHECKING:   # what each family's config defines
        split: int

        @property
        def warps(self) -> int: ...

        @property
        def rows_per_block(self) -> int: ...

    @property
    def block(self) -> int:
        return 32 * self.warps

    @staticmethod
    def n_tiles(n: int) -> int:
        return (n + 7) // 8

    @property
    def kchunk(self) -> int:
        """Halves of d one warp step covers."""
        return PIECE * self.kv

    def chunks(self, d: int) -> int:
        return -(-d // self.kchunk)

    def chunks_per_split(self, d: int) -> int:
        return -(-self.chunks(d) // self.split)

    def grid(self, shape: Shape) -> tuple[int, int, int]:
        return (-(-shape.M // self.rows_per_block), self.split, 1)

    def split_reasons(self, d: int) -> tuple[list[str], bool]:
        """Why the split of d into ``split`` slices of whole chunks cannot work (empty: it can), and whether
        nothing else is worth checking (more splits than chunks)."""
        nch = self.chunks(d)
        if self.split > nch:
            return [f"split={self.split} exceeds the {nch} chunks of {self.kchunk} along d={d}"], True
        cps = self.chunks_per_split(d)
        if self.split > 1 and (self.split - 1) * cps >= nch:
            return [f"split={self.split} with {cps} chunks per split leaves the last split empty (d={d})"], False
        return [], False

    def x_row_halves(self, d: int) -> int:
        """Halves per staged X row: the split's d range, padded so that the 8 lanes of a shared-memory phase
        (rows g, g+1; 4 lanes each) hit distinct banks: rows 64 B apart mod 128 B with one piece per lane,
        16 B apart with two (their lanes' pieces are 32 B apart)."""
        length = self.chunks_per_split(d) * self.kchunk
        target = 64 if self.kv == 1 else 16
        return length + ((target - 2 * length) % 128) // 2


class LastBlockCombine:
    """What the one-launch tensor-core GEMV families (``mma``, ``ring``) share: one kernel per call, whose split of
    d (``split`` > 1) the last block of each row group adds up inside the kernel; the workspace holds the FP32
    partial sums and one counter per row group. A family sets ``kernel_name``."""

    kernel_name = ""

    if TYPE_CHECKING:
        split: int
        block: int

        @property
        def rows_per_block(self) -> int: ...

        def grid(self, shape: Shape) -> tuple[int, int, int]: ...

    def row_groups(self, M: int) -> int:
        """Row groups of M (one counter each)."""
        return -(-M // self.rows_per_block)

    def kernels(self, shape: Shape) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
        """The launches of one call: one kernel, whatever the split."""
        return [(self.kernel_name, self.grid(shape), (self.block, 1, 1))]

    def needs_workspace(self, shape: Shape) -> bool:
        return self.split > 1

    def workspace(self, shape: Shape) -> tuple[int, int]:
        """(float workspace elements, counters) one call needs: the split partial sums and one counter per
        row group."""
        if not self.needs_workspace(shape):
            return 1, 1
        return self.split * shape.n * shape.M, self.row_groups(shape.M)
