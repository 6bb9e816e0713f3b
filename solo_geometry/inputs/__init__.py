"""What the measurements read: images, their features, and arrays from users.

* :mod:`~solo_geometry.inputs.datasets`: the embedded digits, image folders, normalisation
  tables, splits and probe targets;
* :mod:`~solo_geometry.inputs.sizes`: the folders the probes read, checked for one image size;
* :mod:`~solo_geometry.inputs.features`: backbone features Z and head outputs H of an image set;
* :mod:`~solo_geometry.inputs.npfiles`: ``.npy``/``.npz`` files read without running their code;
* :mod:`~solo_geometry.inputs.cifar`: torchvision's CIFAR-10/100 batch files, read by the
  restricted unpickler.

May import: :mod:`solo_geometry.geometry`, :mod:`solo_geometry.linalg` and the root's
:mod:`solo_geometry.state`; never the models, the run-time core or anything above.
"""
