"""Privacy masking judged on real footage: clips and photographs from PyPI packages (``footage``), the
hand-checked face boxes in them (``faces.json``), the degraded clips made from them (``clips``), and the
scores (``score``)."""
