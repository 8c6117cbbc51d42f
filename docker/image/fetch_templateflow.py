"""Pre-fetch the TemplateFlow surfaces the reports draw on into ``$TEMPLATEFLOW_HOME``.

Run once while building the image, so that the container never needs the network:
``prfmap.report.surface`` looks for a template's inflated, very inflated, midthickness, pial
or white surface (the first that exists) and never downloads. fsaverage5 comes from nilearn's
bundled meshes instead. ``tests/containers/test_image_files.py`` checks this list against the
report's templates and TemplateFlow's file listing.
"""

from __future__ import annotations

import sys

HEMIS = ("L", "R")
SURFACES: dict[tuple[str, str], tuple[str, ...]] = {
    ("fsLR", "32k"): ("inflated", "veryinflated", "midthickness", "sphere"),
    ("fsaverage", "10k"): ("pial", "white", "sphere"),
    ("fsaverage", "41k"): ("pial", "white", "sphere"),
    ("fsaverage", "164k"): ("midthickness", "pial", "white", "sphere"),
}
SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("fsaverage", "10k"): ("sulc", "curv"),
    ("fsaverage", "41k"): ("sulc", "curv"),
    ("fsaverage", "164k"): ("sulc", "curv"),
}


def queries() -> list[dict[str, str | None]]:
    """The ``templateflow.api.get`` queries, one file each."""
    out: list[dict[str, str | None]] = []
    for table, extension in ((SURFACES, ".surf.gii"), (SHAPES, ".shape.gii")):
        for (template, density), suffixes in table.items():
            for hemi in HEMIS:
                for suffix in suffixes:
                    out.append(
                        dict(
                            template=template,
                            hemi=hemi,
                            density=density,
                            suffix=suffix,
                            extension=extension,
                            desc=None,
                            space=None,
                        )
                    )
    return out


def main() -> int:
    """Fetch every file; exit 1 naming the first query that gave no file."""
    from pathlib import Path

    from templateflow import api

    for query in queries():
        found = api.get(**query)
        paths = found if isinstance(found, list) else [found]
        if len(paths) != 1 or not Path(paths[0]).is_file() or Path(paths[0]).stat().st_size == 0:
            print(f"fetch_templateflow: no single file for {query}: {paths}", file=sys.stderr)
            return 1
        print(paths[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
